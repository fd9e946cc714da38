#![cfg_attr(feature = "xen", allow(dead_code, unused_imports))]
//! The end-to-end suite: every test body runs over each transport (`local`
//! shared memory and `tcp`) against the backend the environment selects
//! (host test double by default; `PVGPU_TEST_EXECUTOR=cuda` for the GPU).

use pvgpu_frontend::{Client, CuResult, Error, Stream, arg};
use pvgpu_ring::cuda::api::{
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_WARP_SIZE,
    CUdevice_attribute,
};
use pvgpu_tests::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod array_moves;
mod arrays;
mod checkpoint;
mod conditional;
mod conditional_moves;
mod control;
mod copy_nodes;
mod devices;
mod execution;
mod global_moves;
mod gpu_share;
mod graph_memory;
mod graph_moves;
mod graphs;
mod host_nodes;
mod ipc;
mod lifecycle;
mod memops;
mod memory;
mod metrics;
mod migrate;
mod modules;
mod moves;
mod node_params;
mod parity;
mod pools;
mod prepared;
mod tenants;
mod vmm_moves;

use array_moves::*;
use arrays::*;
use checkpoint::*;
use conditional::*;
use conditional_moves::*;
use control::*;
use copy_nodes::*;
use devices::*;
use execution::*;
use global_moves::*;
use graph_memory::*;
use graph_moves::*;
use graphs::*;
use host_nodes::*;
use ipc::*;
use lifecycle::*;
use memops::*;
use memory::*;
use metrics::*;
use migrate::*;
use modules::*;
use moves::*;
use node_params::*;
use parity::*;
use pools::*;
use prepared::*;
use vmm_moves::*;

fn shared() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| if cfg!(feature = "xen") { Harness::external() } else { Harness::start() })
}

fn code<T: std::fmt::Debug>(r: Result<T, Error>) -> CuResult {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.status(),
    }
}

/// The body of a client process killed by the test below (and, in the Xen
/// lab, of programs whose guest is destroyed or whose backend is killed):
/// sets up memory, launches kernels that keep the device busy for
/// `PVGPU_CHILD_SPIN_S` seconds (on the host executor; 1.5 by default),
/// prints READY, waits in a synchronising call, prints how it ended
/// (`SYNC ok` or `SYNC <error code>`), and keeps its session for a minute.
#[test]
fn child_client_helper() {
    let Ok(addr) = std::env::var("PVGPU_CHILD_ADDR") else { return };
    let c = Client::connect(&addr.parse().unwrap(), &pvgpu_frontend::Options::from_env()).unwrap();
    let g = Gpu::new(&c).unwrap();
    let d = g.c.mem_alloc(g.ctx, 32 << 20).unwrap();
    c.memset(d, 1, 1, 32 << 20, Stream::DEFAULT).unwrap();
    c.memcpy_htod(d, &vec![7u8; 4 << 20]).unwrap();
    let spin = g.func("spin").unwrap();
    // In kernels of at most 10 s (the host executor's cap on one spin).
    let mut secs: f64 = std::env::var("PVGPU_CHILD_SPIN_S").ok().and_then(|s| s.parse().ok()).unwrap_or(1.5);
    while secs > 0.0 {
        let cycles = (secs.min(10.0) * 1e9) as i64;
        c.launch(&spin, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&cycles)]).unwrap();
        secs -= 10.0;
    }
    // Before any call that waits: the host executor runs a spin inside the
    // session's request loop, so even a Nop would wait for it.
    println!("READY");
    match c.ctx_synchronize(g.ctx) {
        Ok(()) => println!("SYNC ok"),
        Err(e) => println!("SYNC {:?}", e.code()),
    }
    std::thread::sleep(Duration::from_secs(60));
}

/// A program whose session the backend's operator checkpoints and
/// restores (the Xen lab does it from Dom0, `PVGPU_CHECKPOINTED_ADDR=xen`):
/// device memory and a kernel's result before, the same bytes, handles
/// and a kernel after, without the program doing anything about it. It
/// prints `READY` once its state is made, `DETACHED` when a call's reply
/// says its session left, and `CHECKPOINT ok` at the end.
#[test]
fn checkpointed_client_helper() {
    let Ok(addr) = std::env::var("PVGPU_CHECKPOINTED_ADDR") else { return };
    let c = Client::connect(&addr.parse().unwrap(), &pvgpu_frontend::Options::from_env()).unwrap();
    let g = Gpu::new(&c).unwrap();
    let state = MatSumState::launch(&c, &g, 1 << 16);
    c.ctx_synchronize(g.ctx).unwrap();
    println!("READY session {}", c.info().session_id);
    // With PVGPU_CHECKPOINTED_IDLE the program makes no call until its
    // session has left: the library answers the backend's request for one.
    let idle = std::env::var_os("PVGPU_CHECKPOINTED_IDLE").is_some();
    let deadline = Instant::now() + Duration::from_secs(600);
    while !c.detached() {
        assert!(Instant::now() < deadline, "no checkpoint came in 600 s");
        if !idle {
            c.mem_get_info(g.ctx).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("DETACHED");
    // The next call waits for the session to come back.
    state.check_and_go_on(&c, "the checkpoint");
    state.free(&c);
    println!("CHECKPOINT ok");
}

/// Runs each test body over every transport: `anywhere` lists the bodies
/// that only need a backend to talk to (these also run over Xen, built with
/// `--features xen` for the Xen lab, in a guest against the backend in
/// Dom0); `own_backend` lists those that start, stop or configure the
/// backend under test themselves (local and TCP only; the lab checks a guest
/// destroyed mid-session separately).
macro_rules! over_every_transport {
    (anywhere: [$($any:ident),* $(,)?], own_backend: [$($own:ident),* $(,)?] $(,)?) => {
        #[cfg(not(feature = "xen"))]
        mod local {
            $( #[test] fn $any() { super::$any(pvgpu_tests::Transport::Local) } )*
            $( #[test] fn $own() { super::$own(pvgpu_tests::Transport::Local) } )*
        }
        #[cfg(not(feature = "xen"))]
        mod tcp {
            $( #[test] fn $any() { super::$any(pvgpu_tests::Transport::Tcp) } )*
            $( #[test] fn $own() { super::$own(pvgpu_tests::Transport::Tcp) } )*
        }
        #[cfg(not(feature = "xen"))]
        mod tls {
            $( #[test] fn $any() { super::$any(pvgpu_tests::Transport::Tls) } )*
        }
        // Over RDMA where there is an RDMA device (the Xen lab's guest, or
        // a host with soft-RoCE), against the suite's own backend, or the
        // lab's in Dom0; elsewhere each says why it did not run.
        mod rdma {
            $( #[test] fn $any() {
                if pvgpu_tests::rdma_runs() {
                    super::$any(pvgpu_tests::Transport::Rdma)
                }
            } )*
        }
        #[cfg(feature = "xen")]
        mod xen {
            $( #[test] fn $any() { super::$any(pvgpu_tests::Transport::Xen) } )*
        }
    };
}

over_every_transport!(
    anywhere: [
        hello_and_devices,
        contexts,
        modules_in_every_format,
        linking,
        many_kernel_names,
        globals_feed_kernels,
        copies_of_every_size,
        memsets,
        out_of_range_copies_are_refused,
        bad_handles,
        unknown_opcode,
        malformed_request_ends_only_that_session,
        streams_and_async_copies,
        events,
        kernel_params_of_mixed_sizes,
        stream_waits_and_function_attributes,
        kept_answers_follow_what_the_session_sets,
        pinned_host_memory,
        mirrored_host_memory,
        kernel_fault_is_sticky_and_contained,
        captured_work_replays,
        capture_refusals,
        explicit_graphs,
        graph_handles_are_checked,
        executable_graph_setters,
        host_nodes_run_at_every_launch,
        host_nodes_write_mirrored_memory,
        graph_memory,
        conditional_nodes,
        stream_memory_operations,
        node_parameters,
        kernel_node_attributes,
        device_launch_handles,
        pitched_copy_nodes,
        matsum_matches_cpu,
        jacobi_matches_cpu,
        many_concurrent_clients,
        launches_with_attributes,
        stream_ordered_allocation,
        pitched_copies_and_memsets,
        arrays_round_trip,
        layered_and_mipmapped_arrays,
        array_copies_are_checked,
        texture_and_surface_objects,
        stream_attributes_and_persisting_l2,
        interprocess_handles,
        shareable_physical_memory,
        shared_memory_pools,
        peer_access,
        tensor_maps,
        virtual_memory,
        mapped_host_memory,
        device_status,
        image_cache,
        kernel_output,
    ],
    own_backend: [metrics_follow_a_running_program, pools_of_the_program_s_own, checkpoint_through_a_backend_restart, checkpoint_leaving_the_session_running, a_waiting_resume_takes_its_session_when_it_comes, session_moves_to_another_backend, a_prepared_worker_takes_its_session, a_session_that_changed_since_its_skeleton_is_rebuilt_afresh, another_program_first_gets_the_prepared_worker, handed_memory_stays_with_its_backend_until_taken, a_refused_migration_leaves_the_session_at_its_source, a_migration_past_the_target_s_quota_is_refused, a_parked_snapshot_counts_against_its_peer_s_quota, graphs_move_with_their_session, graphs_survive_a_backend_restart, conditional_graphs_move_with_their_session, conditional_graphs_survive_a_backend_restart, virtual_memory_moves_with_its_session, virtual_memory_survives_a_backend_restart, arrays_and_textures_move_with_their_session, arrays_and_textures_survive_a_backend_restart, pools_move_with_their_session, pools_survive_a_backend_restart, globals_never_looked_up_move_with_their_session, globals_never_looked_up_survive_a_backend_restart, control_socket_lists_and_ends_sessions, interprocess_handles_stay_in_their_guest, memory_quota, graph_memory_quota, client_killed_mid_call, backend_stopped_mid_call, backend_killed_mid_call],
);
