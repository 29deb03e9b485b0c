//! cyberos: run untrusted AI-agent skills in a Linux sandbox, with the invoking process acting as the
//! skill's capability broker. The binary (`src/main.rs`) only parses and dispatches; everything else
//! lives here so that benches, fuzz targets and tests can reach it.

pub mod broker;
pub mod cli;
pub mod cmd;
pub mod exit;
pub mod journal;
pub mod paths;
pub mod sandbox;
pub mod skill;
pub mod telemetry;
pub mod tools;
pub mod util;
