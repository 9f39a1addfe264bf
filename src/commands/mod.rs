pub mod clean;
pub mod psk;
pub mod run;
pub mod serve;
pub mod speed;
