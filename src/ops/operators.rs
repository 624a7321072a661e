//! `std::ops` operators on `&Tensor` and `Tensor` whose output is `Result<Tensor>` (never a
//! panic), as candle's are: `+ - * /` with a tensor or an `f64`, and unary `-`.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::ops::binary::{BinaryOp, Donated};
use crate::ops::donate::{binary_owned, binary_pair};
use crate::ops::map::{ScalarOp, UnaryOp};
use crate::{Result, Tensor};

/// The operators on tensors, by reference (allocating) and owned: an owned operand is
/// consumed and, when nothing else holds its buffer, the result is written into it (see
/// [`Tensor::into_binary`]; `a + &b` or `x * 2.0` in a loop then reuses one buffer).
macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:ident, $bop:ident, $scalar:ident, $sop:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.$op(rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.into_binary(rhs, BinaryOp::$bop)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                binary_owned(rhs, self, Donated::B, BinaryOp::$bop)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                binary_pair(self, rhs, BinaryOp::$bop)
            }
        }
        impl $trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.$scalar(rhs)
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.into_scalar_op(ScalarOp::$sop, rhs)
            }
        }
    };
}

binary_operator!(Add, add, add, Add, add_scalar, Add);
binary_operator!(Sub, sub, sub, Sub, sub_scalar, Sub);
binary_operator!(Mul, mul, mul, Mul, mul_scalar, Mul);
binary_operator!(Div, div, div, Div, div_scalar, Div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        self.into_unary(UnaryOp::Neg)
    }
}
