//! The rule registry.
pub trait DynRule: Sync {
    fn name(&self) -> &'static str;
}
pub fn registry() -> &'static [&'static dyn DynRule] {
    &[]
}
