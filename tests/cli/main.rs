//! The one integration-test binary: every test drives the real `cyberos` binary.

mod broker;
mod faults;
mod fixtures;
mod invoke;
mod list;
mod load;
mod man;
mod properties;
mod regressions;
mod sandbox;
mod sandbox_lib;
mod scaffold;
mod schema;
mod sign;
mod telemetry;
mod tools;
mod util;
mod validate;
