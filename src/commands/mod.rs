pub mod clean;
pub mod run;
pub mod speed;
