//! The transports the end-to-end suite runs its bodies over, and whether
//! RDMA can be among them here.

/// The transports every end-to-end test runs over, as the backend names
/// them (Xen reaches an external backend: see [`crate::Harness::external`]).
pub use pvgpu_backend::handover::Transport;

/// Whether the suite's tests over RDMA run here. Where they cannot, each
/// says why on standard error and passes, unless `PVGPU_TEST_RDMA=required`
/// (the Xen lab, whose kernel has soft-RoCE): then it fails.
pub fn rdma_runs() -> bool {
    match rdma_missing() {
        None => true,
        Some(why) => {
            assert!(std::env::var("PVGPU_TEST_RDMA").as_deref() != Ok("required"), "RDMA is required here, but {why}");
            eprintln!("not run over RDMA: {why}");
            false
        }
    }
}

/// Why the suite's tests over RDMA cannot run here, if they cannot: they
/// need an RDMA device (soft-RoCE counts), rdma-core, and an address of
/// the device's interface: `PVGPU_TEST_RDMA_HOST` for a backend the suite
/// starts, `PVGPU_TEST_RDMA_ADDR` (`HOST:PORT`) for the external backend
/// of the Xen lab.
pub fn rdma_missing() -> Option<String> {
    if pvgpu_rdma::devices().is_empty() {
        return Some(
            "no RDMA device here (for soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE`; CI's kernel has no rdma_rxe, the Xen lab's has)"
                .into(),
        );
    }
    if let Err(e) = pvgpu_rdma::available() {
        return Some(e.to_string());
    }
    let var = if cfg!(feature = "xen") { "PVGPU_TEST_RDMA_ADDR" } else { "PVGPU_TEST_RDMA_HOST" };
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => None,
        _ => Some(format!("{var} is not set: name an address of the RDMA device's network interface")),
    }
}
