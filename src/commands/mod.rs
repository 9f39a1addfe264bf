pub mod clean;
pub mod run;
