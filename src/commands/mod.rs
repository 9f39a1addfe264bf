pub mod clean;
pub mod compare;
pub mod matrix;
pub mod psk;
pub mod report;
pub mod run;
pub mod serve;
pub mod speed;
