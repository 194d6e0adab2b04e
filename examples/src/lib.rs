//! Shared code of the example programs.
