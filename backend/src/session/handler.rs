//! The protocol's command table served by a session: the glue from each
//! command to its handler, `family::handler` as the table names it
//! (`pvgpu_ring::command_table!`), generated: a new command's table line
//! asks for its handler and nothing else here.

use super::{
    Io, Session, area_pin, array, device, graph, ipc, launch, link, memory, mirror, module, peer_copy, pitched, pool, pool_ipc, stream, vmm,
};
use crate::exec::{CuRes, Executor};
use pvgpu_ring::proto::*;

macro_rules! session_handlers {
    ($(
        $(#[$m:meta])*
        $val:literal $name:ident($family:ident::$handler:ident) [$($flag:ident),*]: $req:ty => $rep:ty;
    )*) => {
        // Every method takes `'a`, the lifetime of requests with a tail.
        #[allow(clippy::extra_unused_lifetimes)]
        impl<E: Executor> Handler for Session<E> {
            type Io<'io> = Io<'io>;

            fn reply_buffer<'b>(io: &'b mut Io<'_>) -> &'b mut Vec<u8> {
                io.out
            }

            $(
                fn $handler<'a>(&mut self, r: $req, io: &mut Io<'_>) -> CuRes<$rep> {
                    $family::$handler(self, r, io)
                }
            )*
        }
    };
}

pvgpu_ring::command_table!(session_handlers);
