//! Fault injection (in progress).
