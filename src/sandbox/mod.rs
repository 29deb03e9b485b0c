//! The sandbox (CONTRACT §6).
