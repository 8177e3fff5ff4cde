//! The `com.mxfuse` custom-op domain: one `OrtCustomOp` per op of docs/ops.md, each running the
//! shared [`crate::ops`] kernels. Served to ORT by `RegisterCustomOps` (classic custom-op
//! library) and by the EP factory's `GetCustomOpDomains` (so models holding com.mxfuse nodes load
//! when only the plugin EP is registered).

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::OnceLock;

use ort_sys::{
    ONNXTensorElementDataType as OrtType, OrtApi, OrtCustomOp, OrtCustomOpDomain,
    OrtCustomOpInputOutputCharacteristic as Characteristic, OrtKernelContext, OrtKernelInfo,
    OrtMemType, OrtShapeInferContext, OrtStatusPtr, OrtTensorTypeAndShapeInfo, OrtValue,
};

use crate::error::{Error, Result};
use crate::ffi::api::{api, c_string, check};
use crate::ffi::ep_abi::ORT_API_VERSION;
use crate::ffi::guard::{guard_status, guard_value};
use crate::kernel_io::run_kernel;
use crate::ops::schema::{self, AttrKind, OpSchema, Slot};
use crate::ops::{self, Attrs, Kernel, Parallelism};
use crate::ort_attrs::attr_by_name;
use crate::ort_types::{
    ort_from_onnx, read_tensor_shape_info, tensor_data, value_type_and_dims, UNKNOWN_DIM_PREFIX,
};
use crate::tensor::{Meta, TensorRef};
use graph_rewrites::view::{AttrValue, Dim};

/// An `OrtCustomOp` followed by our data; ORT hands the `OrtCustomOp*` back, which is also a
/// pointer to this struct.
#[repr(C)]
pub struct MxCustomOp {
    base: OrtCustomOp,
    schema: &'static OpSchema,
    name: &'static CStr,
}

// SAFETY: immutable after construction; only function pointers and static data.
unsafe impl Sync for MxCustomOp {}
unsafe impl Send for MxCustomOp {}

unsafe fn this(op: *const OrtCustomOp) -> &'static MxCustomOp {
    &*(op as *const MxCustomOp)
}

fn slot_type(slot: Option<&Slot>) -> OrtType {
    slot.and_then(|s| s.dtype)
        .and_then(|t| ort_from_onnx(t).ok())
        .unwrap_or(OrtType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED)
}

fn characteristic(slot: Option<&Slot>) -> Characteristic {
    match slot {
        Some(s) if s.optional => Characteristic::INPUT_OUTPUT_OPTIONAL,
        _ => Characteristic::INPUT_OUTPUT_REQUIRED,
    }
}

unsafe extern "system" fn get_name(op: *const OrtCustomOp) -> *const c_char {
    this(op).name.as_ptr()
}
unsafe extern "system" fn get_ep_type(_op: *const OrtCustomOp) -> *const c_char {
    // NULL: the kernel runs on ORT's CPU EP (its home in the custom-op library path).
    ptr::null()
}
unsafe extern "system" fn input_type(op: *const OrtCustomOp, i: usize) -> OrtType {
    slot_type(this(op).schema.inputs.get(i))
}
unsafe extern "system" fn input_count(op: *const OrtCustomOp) -> usize {
    this(op).schema.inputs.len()
}
unsafe extern "system" fn output_type(op: *const OrtCustomOp, i: usize) -> OrtType {
    slot_type(this(op).schema.outputs.get(i))
}
unsafe extern "system" fn output_count(op: *const OrtCustomOp) -> usize {
    this(op).schema.outputs.len()
}
unsafe extern "system" fn input_characteristic(op: *const OrtCustomOp, i: usize) -> Characteristic {
    characteristic(this(op).schema.inputs.get(i))
}
unsafe extern "system" fn output_characteristic(
    op: *const OrtCustomOp,
    i: usize,
) -> Characteristic {
    characteristic(this(op).schema.outputs.get(i))
}
unsafe extern "system" fn input_mem_type(_op: *const OrtCustomOp, _i: usize) -> OrtMemType {
    OrtMemType::OrtMemTypeDefault
}
unsafe extern "system" fn variadic_min_arity(_op: *const OrtCustomOp) -> i32 {
    1
}
unsafe extern "system" fn variadic_homogeneity(_op: *const OrtCustomOp) -> i32 {
    0
}
unsafe extern "system" fn start_version(_op: *const OrtCustomOp) -> i32 {
    schema::OPSET
}
unsafe extern "system" fn end_version(_op: *const OrtCustomOp) -> i32 {
    schema::OPSET
}

/// Reads the schema's attributes through `get`, which returns `Ok(None)` for absent ones.
fn collect_attrs(
    schema: &OpSchema,
    mut get: impl FnMut(&str, AttrKind) -> Result<Option<AttrValue>>,
) -> Result<Attrs> {
    let mut values = BTreeMap::new();
    for &(name, kind) in schema.attrs {
        if let Some(v) = get(name, kind)? {
            values.insert(name.to_string(), v);
        }
    }
    Attrs::new(schema, values)
}

/// Reads one attribute from `KernelInfo`. The typed getters fail both for "absent" and for
/// "other type", so on failure the other getters tell a mistyped attribute (an error) from an
/// absent one.
unsafe fn kernel_info_attr(
    info: *const OrtKernelInfo,
    name: &str,
    kind: AttrKind,
) -> Result<Option<AttrValue>> {
    let ort: &OrtApi = api()?.ort;
    let c_name = c_string(name);
    let get_int = || {
        let mut v = 0i64;
        check((ort.KernelInfoGetAttribute_int64)(
            info,
            c_name.as_ptr(),
            &mut v,
        ))
        .ok()
        .map(|_| AttrValue::Int(v))
    };
    let get_float = || {
        let mut v = 0f32;
        check((ort.KernelInfoGetAttribute_float)(
            info,
            c_name.as_ptr(),
            &mut v,
        ))
        .ok()
        .map(|_| AttrValue::Float(v))
    };
    let get_string = || {
        let mut size = 0usize;
        check((ort.KernelInfoGetAttribute_string)(
            info,
            c_name.as_ptr(),
            ptr::null_mut(),
            &mut size,
        ))
        .ok()?;
        let mut buf = vec![0u8; size.max(1)];
        check((ort.KernelInfoGetAttribute_string)(
            info,
            c_name.as_ptr(),
            buf.as_mut_ptr() as *mut c_char,
            &mut size,
        ))
        .ok()?;
        let s = CStr::from_bytes_until_nul(&buf)
            .ok()?
            .to_string_lossy()
            .into_owned();
        Some(AttrValue::String(s))
    };
    let (wanted, others): (Option<AttrValue>, [Option<AttrValue>; 2]) = match kind {
        AttrKind::Int => (get_int(), [get_float(), get_string()]),
        AttrKind::Float => (get_float(), [get_int(), get_string()]),
        AttrKind::String => (get_string(), [get_int(), get_float()]),
    };
    match (wanted, others) {
        (Some(v), _) => Ok(Some(v)),
        (None, [None, None]) => Ok(None),
        (None, [a, b]) => Err(Error::invalid(format!(
            "attribute {name:?} has the wrong type ({:?})",
            a.or(b)
        ))),
    }
}

/// Per-node kernel state handed to ORT.
struct KernelState {
    kernel: Box<dyn Kernel>,
}

unsafe extern "system" fn create_kernel_v2(
    op: *const OrtCustomOp,
    _api: *const OrtApi,
    info: *const OrtKernelInfo,
    kernel: *mut *mut c_void,
) -> OrtStatusPtr {
    guard_status("CreateKernel", || {
        let schema = this(op).schema;
        let attrs = collect_attrs(schema, |name, kind| kernel_info_attr(info, name, kind))?;
        let mut kernel_impl = ops::create(&attrs)?;
        prepack_constants(kernel_impl.as_mut(), info)?;
        let state = Box::new(KernelState {
            kernel: kernel_impl,
        });
        *kernel = Box::into_raw(state) as *mut c_void;
        Ok(())
    })
}

/// Hands the node's constant inputs (initializers) that the kernel asks for to its `prepack`.
unsafe fn prepack_constants(kernel: &mut dyn Kernel, info: *const OrtKernelInfo) -> Result<()> {
    let ort = api()?.ort;
    let mut n = 0usize;
    check((ort.KernelInfo_GetInputCount)(info, &mut n))?;
    // An omitted optional input has an empty name.
    let present: Vec<bool> = (0..n)
        .map(|i| {
            let mut size = 0usize;
            check((ort.KernelInfo_GetInputName)(
                info,
                i,
                ptr::null_mut(),
                &mut size,
            ))
            .is_ok()
                && size > 1
        })
        .collect();
    kernel.inputs_present(&present);
    let wanted = kernel.prepack_inputs();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut metas: Vec<Option<(Meta, *const u8)>> = (0..n).map(|_| None).collect();
    for &i in wanted.iter().filter(|&&i| i < n) {
        let mut is_constant = 0;
        let mut value: *const OrtValue = ptr::null();
        // Fails for an omitted optional input: treat as "not constant".
        if check((ort.KernelInfoGetConstantInput_tensor)(
            info,
            i,
            &mut is_constant,
            &mut value,
        ))
        .is_err()
            || is_constant == 0
            || value.is_null()
        {
            continue;
        }
        let (dtype, dims) = value_type_and_dims(value)?;
        metas[i] = Some((Meta::new(dtype, dims), tensor_data(value)? as *const u8));
    }
    let mut constants = Vec::with_capacity(n);
    for m in &metas {
        constants.push(match m {
            // SAFETY: ORT keeps constant initializers alive for the session; the bytes are only
            // read during this call.
            Some((meta, p)) => Some(TensorRef::from_raw(meta, *p)?),
            None => None,
        });
    }
    kernel.prepack(&constants)
}

unsafe extern "system" fn kernel_compute_v2(
    kernel: *mut c_void,
    ctx: *mut OrtKernelContext,
) -> OrtStatusPtr {
    guard_status("Compute", || {
        let state = &*(kernel as *const KernelState);
        run_kernel(state.kernel.as_ref(), ctx, Parallelism::OrtPool)
    })
}

unsafe extern "system" fn kernel_destroy(kernel: *mut c_void) {
    guard_value((), || {
        if !kernel.is_null() {
            drop(Box::from_raw(kernel as *mut KernelState));
        }
    })
}

/// Writes `meta` (with -1 for unknown dims) as output `i`'s inferred type and shape. ORT's
/// `ShapeInferContext_SetOutputTypeShape` turns a dim without a symbolic name into `dim_value`
/// as given — an unknown dim would become the literal -1, and ORT's optimizer then folds
/// `Shape` of downstream tensors into shapes with -1 entries (a real Quark export failed with
/// "Reshape target shape may not have multiple -1 dimensions"). So every unknown dim gets a
/// name: input 0's symbolic name at the same position where it has one (our ops keep the
/// leading dims of their first input), else a fresh unique name.
unsafe fn set_output(
    ctx: *mut OrtShapeInferContext,
    i: usize,
    meta: &Meta,
    input0_names: &[Option<String>],
) -> Result<()> {
    static FRESH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let ort = api()?.ort;
    let names: Vec<CString> = meta
        .dims
        .iter()
        .enumerate()
        .map(|(d, &v)| {
            let name = if v >= 0 {
                String::new()
            } else if let Some(Some(n)) = input0_names.get(d) {
                n.clone()
            } else {
                let k = FRESH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                format!("{UNKNOWN_DIM_PREFIX}{k}")
            };
            CString::new(name).map_err(|_| Error::invalid("symbolic dim name with a NUL byte"))
        })
        .collect::<Result<_>>()?;
    let mut name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let mut info: *mut OrtTensorTypeAndShapeInfo = ptr::null_mut();
    check((ort.CreateTensorTypeAndShapeInfo)(&mut info))?;
    let result = (|| {
        check((ort.SetTensorElementType)(info, ort_from_onnx(meta.dtype)?))?;
        check((ort.SetDimensions)(
            info,
            meta.dims.as_ptr(),
            meta.dims.len(),
        ))?;
        check((ort.SetSymbolicDimensions)(
            info,
            name_ptrs.as_mut_ptr(),
            name_ptrs.len(),
        ))?;
        check((ort.ShapeInferContext_SetOutputTypeShape)(ctx, i, info))
    })();
    (ort.ReleaseTensorTypeAndShapeInfo)(info);
    result
}

unsafe extern "system" fn infer_output_shape(
    op: *const OrtCustomOp,
    ctx: *mut OrtShapeInferContext,
) -> OrtStatusPtr {
    guard_status("InferOutputShape", || {
        let ort = api()?.ort;
        let schema = this(op).schema;
        let attrs = collect_attrs(schema, |name, _| {
            attr_by_name(name, |c_name, attr| {
                (ort.ShapeInferContext_GetAttribute)(ctx, c_name, attr)
            })
        })?;
        let kernel = ops::create(&attrs)?;
        let mut n = 0usize;
        check((ort.ShapeInferContext_GetInputCount)(ctx, &mut n))?;
        let mut metas = Vec::with_capacity(n);
        let mut input0_names: Vec<Option<String>> = Vec::new();
        for i in 0..n {
            let mut info: *mut OrtTensorTypeAndShapeInfo = ptr::null_mut();
            // An omitted optional input has no type: leave it out.
            if check((ort.ShapeInferContext_GetInputTypeShape)(ctx, i, &mut info)).is_err()
                || info.is_null()
            {
                metas.push(None);
                continue;
            }
            // The info is owned by the context (ORT's C++ wrapper treats it as a const view).
            let ti = read_tensor_shape_info(info)?;
            if i == 0 {
                input0_names = ti
                    .shape
                    .iter()
                    .flatten()
                    .map(|d| match d {
                        Dim::Symbolic(name) => Some(name.clone()),
                        _ => None,
                    })
                    .collect();
            }
            let dims = ti
                .shape
                .unwrap_or_default()
                .iter()
                .map(|d| if let Dim::Known(v) = d { *v } else { -1 })
                .collect();
            metas.push(Some(Meta::new(ti.elem_type, dims)));
        }
        let refs: Vec<Option<&Meta>> = metas.iter().map(Option::as_ref).collect();
        for (i, meta) in kernel.output_metas(&refs)?.iter().enumerate() {
            set_output(ctx, i, meta, &input0_names)?;
        }
        Ok(())
    })
}

fn make_op(schema: &'static OpSchema, name: &'static CStr) -> MxCustomOp {
    MxCustomOp {
        base: OrtCustomOp {
            version: ORT_API_VERSION,
            CreateKernel: None,
            GetName: Some(get_name),
            GetExecutionProviderType: Some(get_ep_type),
            GetInputType: Some(input_type),
            GetInputTypeCount: Some(input_count),
            GetOutputType: Some(output_type),
            GetOutputTypeCount: Some(output_count),
            KernelCompute: None,
            KernelDestroy: Some(kernel_destroy),
            GetInputCharacteristic: Some(input_characteristic),
            GetOutputCharacteristic: Some(output_characteristic),
            GetInputMemoryType: Some(input_mem_type),
            GetVariadicInputMinArity: Some(variadic_min_arity),
            GetVariadicInputHomogeneity: Some(variadic_homogeneity),
            GetVariadicOutputMinArity: Some(variadic_min_arity),
            GetVariadicOutputHomogeneity: Some(variadic_homogeneity),
            CreateKernelV2: Some(create_kernel_v2),
            KernelComputeV2: Some(kernel_compute_v2),
            InferOutputShapeFn: Some(infer_output_shape),
            GetStartVersion: Some(start_version),
            GetEndVersion: Some(end_version),
            GetMayInplace: None,
            ReleaseMayInplace: None,
            GetAliasMap: None,
            ReleaseAliasMap: None,
        },
        schema,
        name,
    }
}

/// The op table (com.mxfuse ops, then the foreign ones), built once; ORT keeps pointers into it
/// for the life of the process.
fn op_table() -> &'static [MxCustomOp] {
    static OPS: OnceLock<Vec<MxCustomOp>> = OnceLock::new();
    OPS.get_or_init(|| {
        schema::ALL
            .iter()
            .chain(schema::FOREIGN)
            .map(|s| {
                // Op names are static literals without NULs; leaking the C copy once is fine.
                let name: &'static CStr = Box::leak(c_string(s.name).into_boxed_c_str());
                make_op(s, name)
            })
            .collect()
    })
}

/// The domain objects, one per domain name in the op table, created once and never released:
/// sessions created from any session options may still point at them.
fn domains() -> Result<&'static [(&'static str, usize)]> {
    static DOMAINS: OnceLock<Vec<(&'static str, usize)>> = OnceLock::new();
    if let Some(d) = DOMAINS.get() {
        return Ok(d);
    }
    let ort = api()?.ort;
    let mut built: Vec<(&'static str, usize)> = Vec::new();
    for op in op_table() {
        let name = op.schema.domain;
        let d = match built.iter().find(|(n, _)| *n == name) {
            Some(&(_, d)) => d as *mut OrtCustomOpDomain,
            None => {
                let c_name = c_string(name);
                let mut d: *mut OrtCustomOpDomain = ptr::null_mut();
                // SAFETY: plain ORT call writing one pointer.
                unsafe { check((ort.CreateCustomOpDomain)(c_name.as_ptr(), &mut d))? };
                built.push((name, d as usize));
                d
            }
        };
        // SAFETY: the op lives in the static table.
        unsafe { check((ort.CustomOpDomain_Add)(d, &op.base))? };
    }
    // Two threads racing here would each build domains; keep the first set, leak the other.
    Ok(DOMAINS.get_or_init(|| built))
}

/// The `com.mxfuse` domain (what `RegisterCustomOps` adds).
pub fn mxfuse_domain() -> Result<*mut OrtCustomOpDomain> {
    domains()?
        .iter()
        .find(|(n, _)| *n == schema::DOMAIN)
        .map(|&(_, d)| d as *mut OrtCustomOpDomain)
        .ok_or_else(|| Error::Ort("com.mxfuse domain missing".into()))
}

/// Every domain the EP factory publishes: com.mxfuse plus the foreign ops' domains.
pub fn ep_domains() -> Result<Vec<*mut OrtCustomOpDomain>> {
    Ok(domains()?
        .iter()
        .map(|&(_, d)| d as *mut OrtCustomOpDomain)
        .collect())
}
