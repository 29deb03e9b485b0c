//! The capability broker of one invocation (CONTRACT §4).
