//! Shared helpers for the cross-crate tests in this folder.

pub mod ort_harness;
