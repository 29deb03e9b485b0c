//! The one integration-test binary: every test drives the real `cyberos` binary.

mod broker;
mod fixtures;
mod invoke;
mod list;
mod man;
mod sandbox;
mod sandbox_lib;
mod scaffold;
mod schema;
mod sign;
mod tools;
mod util;
mod validate;
