//! Autograd: gradients of every differentiable op against f64 reference gradients on the CPU
//! (`ops`), and the graph's behaviour: accumulation, freed graphs, no_grad, memory over a
//! training loop, determinism, deep graphs (`graph`).
// Native only (blocking device and readback).
#![cfg(not(target_arch = "wasm32"))]

#[path = "../common/mod.rs"]
mod common;

mod batchnorm;
mod conv;
mod grad_ref;
mod graph;
mod graphs;
mod newer;
mod norm;
mod ops;
mod rnn;
