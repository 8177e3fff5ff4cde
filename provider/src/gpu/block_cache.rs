//! The device allocator's cache of freed blocks ([`super::allocator`]): ORT allocates every
//! output of our nodes on the GPU device through that allocator and frees it when its last
//! reader ran, each one a `cuMemAlloc` / `cuMemFree` — and a device free synchronizes the whole
//! device on CUDA, so every fused node of a decode step waited for the GPU. Freed blocks are kept
//! by size class ([`size_class`]) and handed to the next allocation of that class instead.
//!
//! Why reuse is safe without a synchronization: every kernel of ours runs on the one (legacy
//! default) stream, in the order launched, and ORT frees a tensor only after its readers were
//! launched; a block handed out again is written by kernels launched later, so after those
//! reads. ORT's copies to and from the host are synchronous on that stream.
//!
//! Bounded: at most `limit` bytes stay cached (`MXFUSE_GPU_ALLOC_CACHE_MIB`, default 1024; 0
//! turns the cache off); a free past it goes to the driver. Everything cached goes back to the
//! driver when the allocator is released (the session ends).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::memory::{size_class, DeviceMemory};
use crate::error::Result;

#[derive(Default)]
struct State {
    /// Free blocks by size class.
    free: HashMap<usize, Vec<u64>>,
    /// Blocks handed out: address → size class.
    live: HashMap<u64, usize>,
    /// Bytes in `free`.
    cached: usize,
}

/// See the module docs.
pub struct BlockCache {
    memory: Arc<dyn DeviceMemory>,
    limit: usize,
    state: Mutex<State>,
}

impl BlockCache {
    /// A cache over `memory` keeping at most `limit` bytes of freed blocks (0: none).
    pub fn new(memory: Arc<dyn DeviceMemory>, limit: usize) -> Self {
        BlockCache {
            memory,
            limit,
            state: Mutex::new(State::default()),
        }
    }

    /// The limit from `MXFUSE_GPU_ALLOC_CACHE_MIB` (default 1024 MiB).
    pub fn limit_from_env() -> usize {
        std::env::var("MXFUSE_GPU_ALLOC_CACHE_MIB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(1024)
            .saturating_mul(1 << 20)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `bytes`: a cached one of its class, else a new one (after giving the
    /// cache back to the driver when the device is out of memory).
    pub fn alloc(&self, bytes: usize) -> Result<u64> {
        if self.limit == 0 {
            return self.memory.alloc(bytes);
        }
        let class = size_class(bytes);
        let mut st = self.state();
        let reused = st.free.get_mut(&class).and_then(Vec::pop);
        let ptr = match reused {
            Some(p) => {
                st.cached -= class;
                p
            }
            None => match self.memory.alloc(class) {
                Ok(p) => p,
                Err(_) => {
                    self.release_cached(&mut st)?;
                    self.memory.alloc(class)?
                }
            },
        };
        st.live.insert(ptr, class);
        Ok(ptr)
    }

    /// Takes back a block from [`BlockCache::alloc`] (or, unknown to it, hands it to the
    /// driver).
    pub fn free(&self, ptr: u64) -> Result<()> {
        let mut st = self.state();
        let Some(class) = st.live.remove(&ptr) else {
            drop(st);
            return self.memory.free(ptr);
        };
        if st.cached + class > self.limit {
            drop(st);
            return self.memory.free(ptr);
        }
        st.cached += class;
        st.free.entry(class).or_default().push(ptr);
        Ok(())
    }

    fn release_cached(&self, st: &mut State) -> Result<()> {
        for (_, blocks) in st.free.drain() {
            for p in blocks {
                self.memory.free(p)?;
            }
        }
        st.cached = 0;
        Ok(())
    }

    /// Bytes of freed blocks held.
    pub fn cached_bytes(&self) -> usize {
        self.state().cached
    }
}

impl Drop for BlockCache {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.release_cached(&mut st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::memory::HostMemory;

    #[test]
    fn freed_blocks_serve_the_next_allocation_of_their_class() {
        let host = Arc::new(HostMemory::default());
        let cache = BlockCache::new(host.clone(), 1 << 20);
        let a = cache.alloc(1000).unwrap();
        cache.free(a).unwrap();
        assert_eq!(cache.cached_bytes(), 1024);
        // Another token count of the same class: the same block, no new allocation.
        assert_eq!(cache.alloc(900).unwrap(), a);
        assert_eq!(host.live_allocations(), 1);
        let b = cache.alloc(5000).unwrap();
        assert_ne!(a, b);
        cache.free(a).unwrap();
        cache.free(b).unwrap();
        drop(cache);
        assert_eq!(host.live_allocations(), 0, "released with the cache");
    }

    #[test]
    fn the_cache_is_bounded_and_can_be_off() {
        let host = Arc::new(HostMemory::default());
        let cache = BlockCache::new(host.clone(), 4096);
        let blocks: Vec<u64> = (0..4).map(|_| cache.alloc(2048).unwrap()).collect();
        for b in blocks {
            cache.free(b).unwrap();
        }
        assert_eq!(cache.cached_bytes(), 4096, "two of four kept");
        assert_eq!(host.live_allocations(), 2);
        let off = BlockCache::new(host.clone(), 0);
        let p = off.alloc(100).unwrap();
        off.free(p).unwrap();
        assert_eq!(host.live_allocations(), 2, "off: freed at once");
    }
}
