//! Memory pools of the program's own (`cuMemPoolCreate`), as the session
//! asks an executor for them: one operation at a time through
//! [`super::ExecContext::pool`]. A pool is the executor's value (the
//! driver's `CUmemoryPool`), which the session keeps behind an id of its
//! own; it never reaches the guest.

/// What [`super::ExecContext::pool`] does; each answers one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolOp<S> {
    /// Makes a pool of device memory on the context's device;
    /// `max_size` 0 is the driver's default. Answers the pool.
    Create {
        /// The most the pool may reserve (`CUmemPoolProps::maxSize`).
        max_size: u64,
        /// Whether another process may import it
        /// (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`), else no
        /// shareable handle types.
        shareable: bool,
    },
    /// Destroys a pool; its outstanding allocations stay valid until
    /// freed. Answers 0.
    Destroy(u64),
    /// Allocates from a pool, ordered on a stream of this context. Answers
    /// the device address.
    Alloc {
        /// The pool.
        pool: u64,
        /// Bytes.
        size: u64,
        /// The stream, `None` for the default stream.
        stream: Option<S>,
    },
    /// Gets (`set` `None`) or sets a pool attribute the session allowed.
    /// Answers its value.
    Attribute {
        /// The pool.
        pool: u64,
        /// `CUmemPool_attribute`.
        attr: u32,
        /// The value to set.
        set: Option<u64>,
    },
    /// Gets or sets a device's access to a pool (`CUmemAccess_flags`).
    /// Answers the flags.
    Access {
        /// The pool.
        pool: u64,
        /// The executor's device ordinal.
        device: usize,
        /// The flags to set.
        set: Option<u32>,
    },
    /// Counts memory a restore placed at `dptr` as an allocation of
    /// `pool` (its bytes in use, what frees give back). Answers 0.
    Adopt {
        /// The pool.
        pool: u64,
        /// The allocation's address.
        dptr: u64,
        /// Its bytes.
        size: u64,
    },
    /// Releases what a pool caches beyond `keep` bytes (`None`: the
    /// device's default pool). Answers 0.
    Trim {
        /// The pool, or the default pool.
        pool: Option<u64>,
        /// Bytes it keeps at least.
        keep: u64,
    },
}
