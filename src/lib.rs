//! Examples and integration tests for tandem.
