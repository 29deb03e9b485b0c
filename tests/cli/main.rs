//! The one integration-test binary: every test drives the real `cyberos` binary.

mod fixtures;
mod list;
mod man;
mod scaffold;
mod schema;
mod sign;
mod telemetry;
mod util;
mod validate;
