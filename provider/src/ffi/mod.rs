//! The C ABI layer: struct layouts, API negotiation, status and panic handling.
pub mod api;
pub mod ep_abi;
pub mod guard;
