//! The one integration-test binary: every test drives the real `cyberos` binary.

mod broker;
mod util;
