//! The protocol's command table served by a session: one line per command,
//! each handed to its family's handler.

use super::{Io, Session, device, launch, memory, module, pitched, stream, vmm};
use crate::exec::{CuRes, Executor};
use pvgpu_ring::proto::*;

// One line per command, kept on one line each.
#[rustfmt::skip]
impl<E: Executor> Handler for Session<E> {
    type Io<'io> = Io<'io>;

    fn reply_buffer<'b>(io: &'b mut Io<'_>) -> &'b mut Vec<u8> {
        io.out
    }

    fn hello(&mut self, r: Hello, _: &mut Io<'_>) -> CuRes<HelloRep> { device::hello(self, r) }
    fn goodbye(&mut self, _: Goodbye, _: &mut Io<'_>) -> CuRes<()> { Ok(()) }
    fn nop(&mut self, _: Nop, _: &mut Io<'_>) -> CuRes<()> { Ok(()) }
    fn init(&mut self, _: Init, _: &mut Io<'_>) -> CuRes<()> { device::init(self) }
    fn driver_get_version(&mut self, _: DriverGetVersion, _: &mut Io<'_>) -> CuRes<I32Rep> { device::driver_version(self) }
    fn device_get_count(&mut self, _: DeviceGetCount, _: &mut Io<'_>) -> CuRes<I32Rep> { device::count(self) }
    fn device_get(&mut self, r: DeviceGet, _: &mut Io<'_>) -> CuRes<I32Rep> { device::get(self, r) }
    fn device_get_properties(&mut self, r: DeviceGetProperties, _: &mut Io<'_>) -> CuRes<DevicePropsRep> { device::properties(self, r) }
    fn device_get_attribute(&mut self, r: DeviceGetAttribute, _: &mut Io<'_>) -> CuRes<I32Rep> { device::attribute(self, r) }
    fn primary_ctx_retain(&mut self, r: PrimaryCtxRetain, io: &mut Io<'_>) -> CuRes<HandleRep> { device::primary_retain(self, r, io) }
    fn primary_ctx_release(&mut self, r: PrimaryCtxRelease, _: &mut Io<'_>) -> CuRes<()> { device::primary_release(self, r) }
    fn ctx_create(&mut self, r: CtxCreate, io: &mut Io<'_>) -> CuRes<HandleRep> { device::create(self, r, io) }
    fn ctx_destroy(&mut self, r: CtxDestroy, _: &mut Io<'_>) -> CuRes<()> { device::destroy(self, r) }
    fn ctx_synchronize(&mut self, r: CtxSynchronize, _: &mut Io<'_>) -> CuRes<()> { device::synchronize(self, r) }
    fn ctx_get_info(&mut self, r: CtxGetInfo, _: &mut Io<'_>) -> CuRes<CtxInfoRep> { device::info(self, r) }
    fn ctx_limit(&mut self, r: CtxLimit, _: &mut Io<'_>) -> CuRes<U64Rep> { device::limit(self, r) }
    fn module_load(&mut self, r: ModuleLoad<'_>, io: &mut Io<'_>) -> CuRes<HandleRep> { module::load(self, r, io) }
    fn module_unload(&mut self, r: ModuleUnload, _: &mut Io<'_>) -> CuRes<()> { module::unload(self, r) }
    fn module_load_cached(&mut self, r: ModuleLoadCached, _: &mut Io<'_>) -> CuRes<HandleRep> { module::load_cached(self, r) }
    fn module_get_function(&mut self, r: ModuleGetFunction<'_>, _: &mut Io<'_>) -> CuRes<FunctionRep> { module::function(self, r) }
    fn module_function_names(&mut self, r: ModuleFunctionNames, _: &mut Io<'_>) -> CuRes<NamesRep> { module::function_names(self, r) }
    fn module_get_global(&mut self, r: ModuleGetGlobal<'_>, _: &mut Io<'_>) -> CuRes<GlobalRep> { module::global(self, r) }
    fn mem_alloc(&mut self, r: MemAlloc, _: &mut Io<'_>) -> CuRes<DptrRep> { memory::alloc(self, r) }
    fn mem_free(&mut self, r: MemFree, _: &mut Io<'_>) -> CuRes<()> { memory::free(self, r) }
    fn mem_get_info(&mut self, r: MemGetInfo, _: &mut Io<'_>) -> CuRes<MemInfoRep> { memory::info(self, r) }
    fn memset(&mut self, r: Memset, _: &mut Io<'_>) -> CuRes<()> { memory::memset(self, r) }
    fn memcpy_htod(&mut self, r: MemcpyHtoD<'_>, io: &mut Io<'_>) -> CuRes<()> { memory::htod(self, r, io) }
    fn memcpy_dtoh(&mut self, r: MemcpyDtoH, io: &mut Io<'_>) -> CuRes<Bulk> { memory::dtoh(self, r, io) }
    fn memcpy_dtod(&mut self, r: MemcpyDtoD, _: &mut Io<'_>) -> CuRes<()> { memory::dtod(self, r) }
    fn stream_create(&mut self, r: StreamCreate, _: &mut Io<'_>) -> CuRes<HandleRep> { stream::create(self, r) }
    fn stream_destroy(&mut self, r: StreamDestroy, _: &mut Io<'_>) -> CuRes<()> { stream::destroy(self, r) }
    fn stream_synchronize(&mut self, r: StreamSynchronize, _: &mut Io<'_>) -> CuRes<()> { stream::synchronize(self, r) }
    fn stream_query(&mut self, r: StreamQuery, _: &mut Io<'_>) -> CuRes<()> { stream::query(self, r) }
    fn stream_wait_event(&mut self, r: StreamWaitEvent, _: &mut Io<'_>) -> CuRes<()> { stream::wait_event(self, r) }
    fn event_create(&mut self, r: EventCreate, _: &mut Io<'_>) -> CuRes<HandleRep> { stream::event_create(self, r) }
    fn event_record(&mut self, r: EventRecord, _: &mut Io<'_>) -> CuRes<()> { stream::event_record(self, r) }
    fn event_query(&mut self, r: EventQuery, _: &mut Io<'_>) -> CuRes<()> { stream::event_query(self, r) }
    fn event_synchronize(&mut self, r: EventSynchronize, _: &mut Io<'_>) -> CuRes<()> { stream::event_synchronize(self, r) }
    fn event_elapsed_time(&mut self, r: EventElapsedTime, _: &mut Io<'_>) -> CuRes<ElapsedRep> { stream::event_elapsed(self, r) }
    fn event_destroy(&mut self, r: EventDestroy, _: &mut Io<'_>) -> CuRes<()> { stream::event_destroy(self, r) }
    fn launch_kernel(&mut self, r: LaunchKernel<'_>, _: &mut Io<'_>) -> CuRes<()> { launch::launch(self, r) }
    fn func_get_attribute(&mut self, r: FuncGetAttribute, _: &mut Io<'_>) -> CuRes<I32Rep> { launch::get_attribute(self, r) }
    fn func_set_attribute(&mut self, r: FuncSetAttribute, _: &mut Io<'_>) -> CuRes<()> { launch::set_attribute(self, r) }
    fn occupancy(&mut self, r: Occupancy, _: &mut Io<'_>) -> CuRes<OccupancyRep> { launch::occupancy(self, r) }
    fn launch_kernel_ex(&mut self, r: LaunchKernelEx<'_>, _: &mut Io<'_>) -> CuRes<()> { launch::launch_ex(self, r) }
    fn occupancy_clusters(&mut self, r: OccupancyClusters<'_>, _: &mut Io<'_>) -> CuRes<I32Rep> { launch::occupancy_clusters(self, r) }
    fn tensor_map_encode(&mut self, r: TensorMapEncode, _: &mut Io<'_>) -> CuRes<TensorMapRep> { launch::tensor_map(self, r) }
    fn mem_alloc_async(&mut self, r: MemAllocAsync, _: &mut Io<'_>) -> CuRes<DptrRep> { memory::alloc_async(self, r) }
    fn mem_free_async(&mut self, r: MemFreeAsync, _: &mut Io<'_>) -> CuRes<()> { memory::free_async(self, r) }
    fn mem_pool_attribute(&mut self, r: MemPoolAttribute, _: &mut Io<'_>) -> CuRes<U64Rep> { memory::pool_attribute(self, r) }
    fn memcpy_2d(&mut self, r: Memcpy2D<'_>, io: &mut Io<'_>) -> CuRes<Bulk> { pitched::copy(self, r, io) }
    fn memset_2d(&mut self, r: Memset2D, _: &mut Io<'_>) -> CuRes<()> { pitched::memset(self, r) }
    fn mem_granularity(&mut self, r: MemGranularity, _: &mut Io<'_>) -> CuRes<U64Rep> { vmm::granularity(self, r) }
    fn mem_address_reserve(&mut self, r: MemAddressReserve, _: &mut Io<'_>) -> CuRes<DptrRep> { vmm::reserve(self, r) }
    fn mem_address_free(&mut self, r: MemAddressFree, _: &mut Io<'_>) -> CuRes<()> { vmm::address_free(self, r) }
    fn mem_create(&mut self, r: MemCreate, _: &mut Io<'_>) -> CuRes<HandleRep> { vmm::create(self, r) }
    fn mem_release(&mut self, r: MemRelease, _: &mut Io<'_>) -> CuRes<()> { vmm::release(self, r) }
    fn mem_map(&mut self, r: MemMap, _: &mut Io<'_>) -> CuRes<()> { vmm::map(self, r) }
    fn mem_unmap(&mut self, r: MemUnmap, _: &mut Io<'_>) -> CuRes<()> { vmm::unmap(self, r) }
    fn mem_set_access(&mut self, r: MemSetAccess, _: &mut Io<'_>) -> CuRes<()> { vmm::set_access(self, r) }
    fn data_area_device(&mut self, _: DataAreaDevice, _: &mut Io<'_>) -> CuRes<U64Rep> { device::area_device(self) }
    fn device_status(&mut self, r: DeviceStatus, _: &mut Io<'_>) -> CuRes<DeviceStatusRep> { device::status(self, r) }
}
