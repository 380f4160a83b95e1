//! In-process loopback provider (in progress).
