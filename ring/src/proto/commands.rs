//! The command table: every opcode with its request type, its reply type and
//! the [`Handler`] method that serves it. Adding a command is one line here
//! (plus its wire struct in [`super::wire`] and, if it has a tail, its
//! [`Body`] in [`super::body`]); the compiler then asks for the backend's
//! handler, and the client's [`Command`] call is typed by the same line.

use super::body::*;
use super::wire::*;
use super::{DecodeError, Header, PROTOCOL_VERSION};
use crate::cuda::CuError;

/// A request type: its opcode and what the backend answers.
pub trait Command<'a>: Body<'a> {
    /// The opcode.
    const OP: Opcode;
    /// The reply's payload.
    type Reply: Reply;
}

macro_rules! commands {
    ($(
        $(#[$m:meta])*
        $val:literal $name:ident($method:ident): $req:ty => $rep:ty;
    )*) => {
        /// Operation codes of protocol version 1.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Opcode { $( $(#[$m])* $name = $val ),* }

        impl Opcode {
            /// Every opcode, in numeric order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$name ),* ];
        }

        impl TryFrom<u16> for Opcode {
            type Error = DecodeError;
            fn try_from(v: u16) -> Result<Self, DecodeError> {
                match v {
                    $( $val => Ok(Opcode::$name), )*
                    other => Err(DecodeError::UnknownOpcode(other)),
                }
            }
        }

        $(
            impl<'a> Command<'a> for $req {
                const OP: Opcode = Opcode::$name;
                type Reply = $rep;
            }
        )*

        /// A decoded request. Borrowed tails point into the caller's private
        /// copy of the payload, never into shared memory.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request<'a> { $( $(#[$m])* $name($req) ),* }

        /// What serves each request: one method per command, returning the
        /// command's typed reply or the `CUresult` of its failure.
        /// [`Request::dispatch`] calls the method and encodes the reply.
        // Every method takes `'a`, the lifetime of requests with a tail.
        #[allow(clippy::extra_unused_lifetimes)]
        pub trait Handler {
            /// Per-call context the methods share (the backend's data area
            /// and the reply buffer bulk replies are written into).
            type Io<'io>;
            /// The buffer of `io` that the reply payload is appended to.
            fn reply_buffer<'b>(io: &'b mut Self::Io<'_>) -> &'b mut Vec<u8>;
            $(
                $(#[$m])*
                fn $method<'a>(&mut self, req: $req, io: &mut Self::Io<'_>) -> Result<$rep, CuError>;
            )*
        }

        impl<'a> Request<'a> {
            /// Decodes a request from its header and a private copy of its
            /// payload.
            pub fn decode(h: &Header, p: &'a [u8]) -> Result<Request<'a>, DecodeError> {
                if h.version.get() != PROTOCOL_VERSION {
                    return Err(DecodeError::Version(h.version.get()));
                }
                if h.payload_len.get() as usize != p.len() {
                    return Err(DecodeError::Truncated);
                }
                Ok(match Opcode::try_from(h.opcode.get())? {
                    $( Opcode::$name => Request::$name(<$req as Body>::decode(Opcode::$name, p)?), )*
                })
            }

            /// The request's opcode.
            pub fn opcode(&self) -> Opcode {
                match self { $( Request::$name(_) => Opcode::$name, )* }
            }

            /// Appends the request's payload to `out`.
            pub fn encode(&self, out: &mut Vec<u8>) {
                match self { $( Request::$name(r) => r.encode(out), )* }
            }

            /// Runs the request on `h` and appends the encoded reply to the
            /// reply buffer of `io` (after any bulk bytes the handler wrote
            /// there).
            pub fn dispatch<H: Handler>(self, h: &mut H, io: &mut H::Io<'_>) -> Result<(), CuError> {
                match self { $( Request::$name(r) => h.$method(r, io).map(|rep| rep.encode(H::reply_buffer(io))), )* }
            }
        }
    };
}

commands! {
    /// First message on every connection: version negotiation.
    1 Hello(hello): Hello => HelloRep;
    /// Orderly end of the session.
    2 Goodbye(goodbye): Goodbye => ();
    /// Does nothing; measures the round trip.
    3 Nop(nop): Nop => ();
    /// `cuInit`.
    4 Init(init): Init => ();
    /// `cuDriverGetVersion`.
    5 DriverGetVersion(driver_get_version): DriverGetVersion => I32Rep;
    /// `cuDeviceGetCount`.
    6 DeviceGetCount(device_get_count): DeviceGetCount => I32Rep;
    /// `cuDeviceGet`.
    7 DeviceGet(device_get): DeviceGet => I32Rep;
    /// Name, UUID, total memory and every attribute of a device, cached by
    /// the frontend (`cuDeviceGetName`, `cuDeviceGetUuid`,
    /// `cuDeviceTotalMem`, `cuDeviceGetAttribute`).
    8 DeviceGetProperties(device_get_properties): DeviceGetProperties => DevicePropsRep;
    /// `cuDeviceGetAttribute` of one attribute.
    9 DeviceGetAttribute(device_get_attribute): DeviceGetAttribute => I32Rep;
    /// `cuDevicePrimaryCtxRetain`.
    10 PrimaryCtxRetain(primary_ctx_retain): PrimaryCtxRetain => HandleRep;
    /// `cuDevicePrimaryCtxRelease`.
    11 PrimaryCtxRelease(primary_ctx_release): PrimaryCtxRelease => ();
    /// `cuCtxCreate`.
    12 CtxCreate(ctx_create): CtxCreate => HandleRep;
    /// `cuCtxDestroy`.
    13 CtxDestroy(ctx_destroy): CtxDestroy => ();
    /// `cuCtxSynchronize`.
    14 CtxSynchronize(ctx_synchronize): CtxSynchronize => ();
    /// `cuModuleLoadData` / `cuModuleLoadFatBinary`.
    15 ModuleLoad(module_load): ModuleLoad<'a> => HandleRep;
    /// `cuModuleUnload`.
    16 ModuleUnload(module_unload): ModuleUnload => ();
    /// `cuModuleGetFunction`, with the parameter layout (`cuFuncGetParamInfo`).
    17 ModuleGetFunction(module_get_function): ModuleGetFunction<'a> => FunctionRep;
    /// `cuModuleGetGlobal`.
    18 ModuleGetGlobal(module_get_global): ModuleGetGlobal<'a> => GlobalRep;
    /// `cuMemAlloc`.
    19 MemAlloc(mem_alloc): MemAlloc => DptrRep;
    /// `cuMemFree`.
    20 MemFree(mem_free): MemFree => ();
    /// `cuMemGetInfo`.
    21 MemGetInfo(mem_get_info): MemGetInfo => MemInfoRep;
    /// `cuMemsetD8/D16/D32` and their `Async` forms.
    22 Memset(memset): Memset => ();
    /// `cuMemcpyHtoD` / `cuMemcpyHtoDAsync`.
    23 MemcpyHtoD(memcpy_htod): MemcpyHtoD<'a> => ();
    /// `cuMemcpyDtoH` / `cuMemcpyDtoHAsync`.
    24 MemcpyDtoH(memcpy_dtoh): MemcpyDtoH => Bulk;
    /// `cuMemcpyDtoD` / `cuMemcpyDtoDAsync`.
    25 MemcpyDtoD(memcpy_dtod): MemcpyDtoD => ();
    /// `cuStreamCreate` / `cuStreamCreateWithPriority`.
    26 StreamCreate(stream_create): StreamCreate => HandleRep;
    /// `cuStreamDestroy`.
    27 StreamDestroy(stream_destroy): StreamDestroy => ();
    /// `cuStreamSynchronize`.
    28 StreamSynchronize(stream_synchronize): StreamSynchronize => ();
    /// `cuStreamQuery`.
    29 StreamQuery(stream_query): StreamQuery => ();
    /// `cuEventCreate`.
    30 EventCreate(event_create): EventCreate => HandleRep;
    /// `cuEventRecord`.
    31 EventRecord(event_record): EventRecord => ();
    /// `cuEventQuery`.
    32 EventQuery(event_query): EventQuery => ();
    /// `cuEventSynchronize`.
    33 EventSynchronize(event_synchronize): EventSynchronize => ();
    /// `cuEventElapsedTime`.
    34 EventElapsedTime(event_elapsed_time): EventElapsedTime => ElapsedRep;
    /// `cuEventDestroy`.
    35 EventDestroy(event_destroy): EventDestroy => ();
    /// `cuLaunchKernel`.
    36 LaunchKernel(launch_kernel): LaunchKernel<'a> => ();
    /// `cuStreamWaitEvent`.
    37 StreamWaitEvent(stream_wait_event): StreamWaitEvent => ();
    /// `cuFuncGetAttribute`.
    38 FuncGetAttribute(func_get_attribute): FuncGetAttribute => I32Rep;
    /// `cuFuncSetAttribute`.
    39 FuncSetAttribute(func_set_attribute): FuncSetAttribute => ();
    /// Facts about a context: API version, flags, stream priority range
    /// (`cuCtxGetApiVersion`, `cuCtxGetFlags`, `cuCtxGetStreamPriorityRange`).
    40 CtxGetInfo(ctx_get_info): CtxGetInfo => CtxInfoRep;
    /// `cuCtxGetLimit` / `cuCtxSetLimit`.
    41 CtxLimit(ctx_limit): CtxLimit => U64Rep;
    /// The occupancy calculator (`cuOccupancy*`).
    42 Occupancy(occupancy): Occupancy => OccupancyRep;
    /// The names of a module's kernels (`cuModuleEnumerateFunctions`).
    43 ModuleFunctionNames(module_function_names): ModuleFunctionNames => NamesRep;
    /// `cuLaunchKernelEx`.
    44 LaunchKernelEx(launch_kernel_ex): LaunchKernelEx<'a> => ();
    /// `cuOccupancyMaxActiveClusters`, `cuOccupancyMaxPotentialClusterSize`.
    45 OccupancyClusters(occupancy_clusters): OccupancyClusters<'a> => I32Rep;
    /// `cuMemAllocAsync`.
    46 MemAllocAsync(mem_alloc_async): MemAllocAsync => DptrRep;
    /// `cuMemFreeAsync`.
    47 MemFreeAsync(mem_free_async): MemFreeAsync => ();
    /// `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` of the default pool.
    48 MemPoolAttribute(mem_pool_attribute): MemPoolAttribute => U64Rep;
    /// `cuMemcpy2D` and its `Async` form (host, device, pitched).
    49 Memcpy2D(memcpy_2d): Memcpy2D<'a> => Bulk;
    /// `cuMemsetD2D8/16/32` and their `Async` forms.
    50 Memset2D(memset_2d): Memset2D => ();
    /// `cuTensorMapEncodeTiled` / `cuTensorMapEncodeIm2col`.
    51 TensorMapEncode(tensor_map_encode): TensorMapEncode => TensorMapRep;
    /// `cuMemGetAllocationGranularity`.
    52 MemGranularity(mem_granularity): MemGranularity => U64Rep;
    /// `cuMemAddressReserve`.
    53 MemAddressReserve(mem_address_reserve): MemAddressReserve => DptrRep;
    /// `cuMemAddressFree`.
    54 MemAddressFree(mem_address_free): MemAddressFree => ();
    /// `cuMemCreate`.
    55 MemCreate(mem_create): MemCreate => HandleRep;
    /// `cuMemRelease`.
    56 MemRelease(mem_release): MemRelease => ();
    /// `cuMemMap`.
    57 MemMap(mem_map): MemMap => ();
    /// `cuMemUnmap`.
    58 MemUnmap(mem_unmap): MemUnmap => ();
    /// `cuMemSetAccess`.
    59 MemSetAccess(mem_set_access): MemSetAccess => ();
    /// The device address of the data area, 0 when the GPU cannot reach
    /// it (`cuMemHostGetDevicePointer`).
    60 DataAreaDevice(data_area_device): DataAreaDevice => U64Rep;
    /// Memory and gauges of a device, for NVML in the guest.
    61 DeviceStatus(device_status): DeviceStatus => DeviceStatusRep;
    /// A module from the backend's image cache; `CUDA_ERROR_NOT_FOUND`
    /// when it does not hold the image for this guest (send it then).
    62 ModuleLoadCached(module_load_cached): ModuleLoadCached => HandleRep;
}

impl Opcode {
    /// Whether a request waiting for its reply first reports the error a
    /// posted call left pending. Only the session's own housekeeping does
    /// not (it is no CUDA call that could report it).
    pub fn reports_pending(self) -> bool {
        !matches!(self, Opcode::Hello | Opcode::Goodbye | Opcode::Nop | Opcode::DriverGetVersion)
    }
}
