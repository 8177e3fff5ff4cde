//! Conversions between ONNX type protos and [`TensorInfo`].

use crate::onnx_pb::{
    tensor_shape_proto::{dimension::Value as DimValue, Dimension},
    type_proto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::view::{Dim, TensorInfo};

/// The tensor type of a value_info entry; `None` for non-tensor or untyped entries.
pub(super) fn info_from_value_info(vi: &ValueInfoProto) -> Option<TensorInfo> {
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    let shape = t.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(DimValue::DimValue(v)) => Dim::Known(*v),
                Some(DimValue::DimParam(p)) => Dim::Symbolic(p.clone()),
                None => Dim::Unknown,
            })
            .collect()
    });
    Some(TensorInfo {
        elem_type: t.elem_type.unwrap_or(0),
        shape,
    })
}

/// The type an initializer declares through its data type and dims.
pub(super) fn info_from_tensor(t: &TensorProto) -> TensorInfo {
    TensorInfo {
        elem_type: t.data_type.unwrap_or(0),
        shape: Some(t.dims.iter().map(|&d| Dim::Known(d)).collect()),
    }
}

/// A value_info entry for `name` with type `info` (what `add_value` writes on save).
pub(super) fn value_info_from_info(name: &str, info: &TensorInfo) -> ValueInfoProto {
    let shape = info.shape.as_ref().map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| Dimension {
                denotation: None,
                value: match d {
                    Dim::Known(v) => Some(DimValue::DimValue(*v)),
                    Dim::Symbolic(p) => Some(DimValue::DimParam(p.clone())),
                    Dim::Unknown => None,
                },
            })
            .collect(),
    });
    ValueInfoProto {
        name: Some(name.to_owned()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(info.elem_type),
                shape,
            })),
        }),
        doc_string: None,
        metadata_props: vec![],
    }
}
