// The CPU RHN recurrence's two loops, forward and the backward walk, with each micro-step's gating
// in one vectorised pass: what kernels/rhn_eager.py runs in PyTorch operations, on the same buffers.
//
// Why C++: at the CPU benchmark's shape a micro-step's gating is ~5,000 values, and each PyTorch
// operation on so few costs 2-5 us of its own (dispatch, TensorIterator), more than its arithmetic;
// the forward's three operations a micro-step and the walk's two (after four over all micro-steps
// at once, for the gate factors) become one pass each here. The products stay PyTorch's (MKL's) own.
// Loaded by kernels/rhn_cpu.py (torch.utils.cpp_extension, built on first use) as the operators
// torch.ops.highwaynet_cpu.*; no Python headers are needed. Built for the instruction set (AVX2 or
// AVX-512) that PyTorch's own kernels use on the machine.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

namespace {

using at::Tensor;

// Rows of at most this many values run on the calling thread alone: an OpenMP region costs more
// than such a pass (at batch 20, hidden 256, a micro-step's 5,120 values take ~3 us).
constexpr int64_t kValuesPerThread = 32768;

// One forward gate over n values. h holds 2a_H (H's rows of every term were doubled, so that
// tanh(a_H) = 2 sigmoid(2a_H) - 1) and t holds a_T: they become tanh and sigmoid in place, as the
// backward reads them. s_next = s + t (h - s); with a mask, u_next = s_next * mask, the input of
// the next micro-step's product.
template <typename T>
void gate_forward(T* h, T* t, const T* s, T* s_next, const T* mask, T* u_next, int64_t n) {
  using V = at::vec::Vectorized<T>;
  const V one(T(1)), two(T(2));
  int64_t i = 0;
  for (; i + V::size() <= n; i += V::size()) {
    // exp_u20: ATen's faster exp (within 20 ulp; for float64, exp), what its float32 softmax uses:
    // the two exponentials are most of this pass's time (8.0 us a micro-step with exp, 4.2 with
    // exp_u20, at the CPU benchmark's shape on AVX2; 4.6 and 3.1 on AVX-512).
    const V h_in = V::loadu(h + i), t_in = V::loadu(t + i);
    // exp_u20 gives a finite number for NaN: a NaN in must stay NaN out, as in the PyTorch reference
    const V hv = V::blendv(two / (one + h_in.neg().exp_u20()) - one, h_in, h_in.isnan());
    const V tv = V::blendv(one / (one + t_in.neg().exp_u20()), t_in, t_in.isnan());
    const V sv = V::loadu(s + i);
    const V out = sv + tv * (hv - sv);
    hv.store(h + i);
    tv.store(t + i);
    out.store(s_next + i);
    if (mask) (out * V::loadu(mask + i)).store(u_next + i);
  }
  for (; i < n; ++i) {
    const T hv = T(2) / (T(1) + std::exp(-h[i])) - T(1);
    const T tv = T(1) / (T(1) + std::exp(-t[i]));
    const T out = s[i] + tv * (hv - s[i]);
    h[i] = hv;
    t[i] = tv;
    s_next[i] = out;
    if (mask) u_next[i] = out * mask[i];
  }
}

// One backward gate over n values. The state's gradient g (what the next micro-step carried back,
// null at the walk's start, plus the output's gradient g_add where the micro-step ends a time step)
// gives dz = [g t (1 - h^2) | g t (1 - t)(h - s)] and what the carry passes on, (1 - t) g.
template <typename T>
void gate_backward(const T* h, const T* t, const T* s, const T* g, const T* g_add, T* dz_h, T* dz_t,
                   T* carried, int64_t n) {
  using V = at::vec::Vectorized<T>;
  const V one(T(1)), zero(T(0));
  int64_t i = 0;
  for (; i + V::size() <= n; i += V::size()) {
    const V hv = V::loadu(h + i), tv = V::loadu(t + i);
    V gv = g ? V::loadu(g + i) : zero;
    if (g_add) gv = gv + V::loadu(g_add + i);
    const V gt = gv * tv;
    (gt * (one - hv * hv)).store(dz_h + i);
    (gt * (one - tv) * (hv - V::loadu(s + i))).store(dz_t + i);
    (gv - gt).store(carried + i);
  }
  for (; i < n; ++i) {
    const T gv = (g ? g[i] : T(0)) + (g_add ? g_add[i] : T(0));
    const T gt = gv * t[i];
    dz_h[i] = gt * (T(1) - h[i] * h[i]);
    dz_t[i] = gt * (T(1) - t[i]) * (h[i] - s[i]);
    carried[i] = gv - gt;
  }
}

// Where micro-step (d, step)'s h and t rows lie in z (D, T, P, B, W): with P = 2 (h and t two
// matrices, W = H) h's rows then t's, B x H each; with P = 1 each row is [h | t] (W = 2H).
struct Layout {
  int64_t row, t_offset;
  Layout(const Tensor& z, int64_t hidden)
      : row(z.size(2) == 2 ? hidden : 2 * hidden), t_offset(z.size(2) == 2 ? z.size(3) * hidden : hidden) {}
};

// A view of a buffer, made once and moved to each micro-step's part of it by its storage offset:
// a select (or unsqueeze, expand) a micro-step costs ~1 us of its own each, which on 140 micro-steps
// a window at the CPU benchmark's shape adds up to more than the gating pass.
struct Cursor {
  Tensor view;
  int64_t first;  // the storage offset of the buffer's first element
  explicit Cursor(Tensor v) : view(std::move(v)), first(view.storage_offset()) {}
  void at(int64_t offset) { view.unsafeGetTensorImpl()->set_storage_offset(first + offset); }
};

void check(const Tensor& z, const Tensor& inputs, const char* what) {
  TORCH_CHECK(z.dim() == 5 && inputs.dim() == 4, what, ": z must be (D, T, P, B, W) and inputs (D, T + 1, B, H)");
  TORCH_CHECK(z.is_contiguous() && inputs.is_contiguous(), what, ": z and inputs must be contiguous");
  TORCH_CHECK(z.scalar_type() == inputs.scalar_type(), what, ": z and inputs must have one dtype");
}

// z (D, T, P, B, W): each micro-step's additive term, onto which its product is added, then its
// [h | t]; inputs (D, T + 1, B, H): inputs[0, 0] the initial state, and micro-step (step, d)'s input
// state written to inputs[d, step] (the last state to inputs[0, T]); weights_t[d] (P, H, W): R_d^T
// in column blocks, H's rows doubled; mask (B, H) or none.
void rhn_forward_loop(Tensor z, Tensor inputs, std::vector<Tensor> weights_t, c10::optional<Tensor> mask) {
  check(z, inputs, "rhn_forward_loop");
  const int64_t depth = z.size(0), steps = z.size(1), parts = z.size(2), batch = z.size(3);
  const int64_t hidden = inputs.size(3);
  const Layout layout(z, hidden);
  const Tensor m = mask ? mask->contiguous() : Tensor();
  Tensor u = m.defined() ? inputs[0][0] * m : Tensor();  // with a mask, the product's input s * mask
  // The product's two operands as one view each, moved from micro-step to micro-step (see Cursor).
  Cursor zk(z.select(0, 0).select(0, 0));
  Cursor s(inputs.select(0, 0).select(0, 0).expand({parts, batch, hidden}));
  const Tensor product_input = u.defined() ? u.expand({parts, batch, hidden}) : s.view;
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "rhn_forward_loop", [&] {
    const scalar_t* mp = m.defined() ? m.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* up = u.defined() ? u.data_ptr<scalar_t>() : nullptr;
    scalar_t* const z0 = z.data_ptr<scalar_t>();
    scalar_t* const in0 = inputs.data_ptr<scalar_t>();
    for (int64_t k = 0; k < steps * depth; ++k) {
      const int64_t step = k / depth, d = k % depth, next = k + 1;
      const int64_t z_at = d * z.stride(0) + step * z.stride(1), s_at = d * inputs.stride(0) + step * inputs.stride(1);
      zk.at(z_at);
      s.at(s_at);
      zk.view.baddbmm_(product_input, weights_t[d]);
      scalar_t* zp = z0 + z_at;
      const scalar_t* sp = in0 + s_at;
      scalar_t* np = in0 + (next % depth) * inputs.stride(0) + (next / depth) * inputs.stride(1);
      at::parallel_for(0, batch, std::max<int64_t>(1, kValuesPerThread / hidden), [&](int64_t first, int64_t end) {
        for (int64_t b = first; b < end; ++b) {
          const int64_t offset = b * hidden;
          gate_forward<scalar_t>(zp + b * layout.row, zp + layout.t_offset + b * layout.row, sp + offset,
                                 np + offset, mp ? mp + offset : nullptr, up ? up + offset : nullptr, hidden);
        }
      });
    }
  });
}

// The backward walk over z and inputs as rhn_forward_loop left them. grad_out (T, B, H): the
// states' gradient; dz (D, T, B, 2H): written, each micro-step's [g_H | g_T]; weights_q[d]
// (Q, 2H, H/Q): R_d in Q column blocks, Q = parts (1, or 2 where H is even: each of two threads
// then makes its block of the state's gradient); mask_q: the mask as (Q, B, H/Q), or none.
// Returns the initial state's gradient (Q, B, H/Q).
Tensor rhn_backward_walk(Tensor grad_out, Tensor z, Tensor inputs, Tensor dz, std::vector<Tensor> weights_q,
                         c10::optional<Tensor> mask_q, int64_t parts) {
  check(z, inputs, "rhn_backward_walk");
  const int64_t depth = z.size(0), steps = z.size(1), batch = z.size(3), hidden = inputs.size(3);
  TORCH_CHECK(parts >= 1 && hidden % parts == 0, "rhn_backward_walk: parts must divide the hidden size");
  TORCH_CHECK(grad_out.is_contiguous() && dz.is_contiguous(), "rhn_backward_walk: grad_out and dz must be contiguous");
  TORCH_CHECK(grad_out.scalar_type() == z.scalar_type() && dz.scalar_type() == z.scalar_type(),
              "rhn_backward_walk: grad_out, dz and z must have one dtype");
  const int64_t units = hidden / parts;
  const Layout layout(z, hidden);
  // Micro-step k reads the carried gradient the one after it wrote: two buffers, in turn.
  const Tensor buffers = at::empty({2, parts, batch, units}, z.options());
  const Tensor carried_in[2] = {buffers.select(0, 0), buffers.select(0, 1)};
  // micro-step k's rows of dz, [g_H | g_T] (B, 2H), once for each block of the product (see Cursor)
  Cursor rows(dz.select(0, 0).select(0, 0).unsqueeze(0).expand({parts, batch, 2 * hidden}));
  Tensor g;  // none yet: the walk starts from the last output's gradient alone
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "rhn_backward_walk", [&] {
    const scalar_t* const z0 = z.const_data_ptr<scalar_t>();
    const scalar_t* const in0 = inputs.const_data_ptr<scalar_t>();
    scalar_t* const dz0 = dz.data_ptr<scalar_t>();
    const scalar_t* const grad0 = grad_out.const_data_ptr<scalar_t>();
    for (int64_t k = steps * depth - 1; k >= 0; --k) {
      const int64_t step = k / depth, d = k % depth;
      const scalar_t* zp = z0 + d * z.stride(0) + step * z.stride(1);
      const scalar_t* sp = in0 + d * inputs.stride(0) + step * inputs.stride(1);
      const int64_t dz_at = d * dz.stride(0) + step * dz.stride(1);
      scalar_t* dp = dz0 + dz_at;
      const scalar_t* add = d == depth - 1 ? grad0 + step * grad_out.stride(0) : nullptr;
      const scalar_t* gp = g.defined() ? g.const_data_ptr<scalar_t>() : nullptr;
      const Tensor& carried = carried_in[k % 2];
      scalar_t* cp = carried.data_ptr<scalar_t>();
      at::parallel_for(0, batch, std::max<int64_t>(1, kValuesPerThread / hidden), [&](int64_t first, int64_t end) {
        for (int64_t b = first; b < end; ++b) {
          for (int64_t q = 0; q < parts; ++q) {
            const int64_t i = q * units, block = (q * batch + b) * units;  // column i: block q's first
            gate_backward<scalar_t>(zp + b * layout.row + i, zp + layout.t_offset + b * layout.row + i,
                                    sp + b * hidden + i, gp ? gp + block : nullptr, add ? add + b * hidden + i : nullptr,
                                    dp + b * 2 * hidden + i, dp + b * 2 * hidden + hidden + i, cp + block, units);
          }
        }
      });
      // the state's gradient: what the carry passes on, plus what flows back through R_d
      rows.at(dz_at);
      if (mask_q) {
        carried.addcmul_(at::bmm(rows.view, weights_q[d]), *mask_q);
      } else {
        carried.baddbmm_(rows.view, weights_q[d]);
      }
      g = carried;
    }
  });
  return g;
}

}  // namespace

TORCH_LIBRARY(highwaynet_cpu, m) {
  m.def("rhn_forward_loop(Tensor(a!) z, Tensor(b!) inputs, Tensor[] weights_t, Tensor? mask) -> ()");
  m.def("rhn_backward_walk(Tensor grad_out, Tensor z, Tensor inputs, Tensor(a!) dz, Tensor[] weights_q, "
        "Tensor? mask_q, int parts) -> Tensor");
}

TORCH_LIBRARY_IMPL(highwaynet_cpu, CPU, m) {
  m.impl("rhn_forward_loop", &rhn_forward_loop);
  m.impl("rhn_backward_walk", &rhn_backward_walk);
}
