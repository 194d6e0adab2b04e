//! Integration tests live in `tests/`; shared helpers (fault-injecting servers) live here.
