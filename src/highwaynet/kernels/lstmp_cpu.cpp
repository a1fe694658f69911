// The recurrence of an LSTM with a projection and clipping (ELMo's biLM: TensorFlow's LSTMCell with
// num_proj, cell_clip and proj_clip) on the CPU: the loop over time in C++, each step's element-wise
// work one vectorised pass. What kernels/lstmp.py's lstmp_recurrence_reference runs in PyTorch
// operations, on the same buffers and with the same matrix products (PyTorch's, MKL's).
//
// Why C++: a step's element-wise work is a dozen PyTorch operations on (batch x 4 cell) values, each a
// pass over memory with its own dispatch cost; here it is one pass reading the gates once and writing
// the cell and the projection's input, and one short pass clipping the output and carrying the state.
// The input products are out of the loop (one product for the whole window, done by the caller).
// Loaded by kernels/lstmp_cpu.py (torch.utils.cpp_extension, built on first use) as the operator
// torch.ops.highwaynet_lstmp_cpu.lstmp_forward_loop.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

namespace {

using at::Tensor;

// Rows of fewer values than this run on the calling thread alone (an OpenMP region costs more).
constexpr int64_t kValuesPerThread = 16384;

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// One row of one step: gates g = [i | j | f | o] (4 x cells, the forget bias already in f), the
// cell c updated in place, m = sigmoid(o) tanh(c) written: TensorFlow's LSTMCell,
// c = sigmoid(f) c + sigmoid(i) tanh(j), clipped to +-clip after its update.
template <typename T>
void cell_row(const T* g, T* c, T* m, int64_t cells, bool clip, T bound) {
  using V = at::vec::Vectorized<T>;
  const T* gi = g;
  const T* gj = g + cells;
  const T* gf = g + 2 * cells;
  const T* go = g + 3 * cells;
  const V one(T(1)), zero(T(0)), hi(bound), lo(-bound);
  int64_t k = 0;
  for (; k + V::size() <= cells; k += V::size()) {
    const V sf = (one + (zero - V::loadu(gf + k)).exp()).reciprocal();
    const V si = (one + (zero - V::loadu(gi + k)).exp()).reciprocal();
    const V so = (one + (zero - V::loadu(go + k)).exp()).reciprocal();
    V cn = sf * V::loadu(c + k) + si * V::loadu(gj + k).tanh();
    if (clip) cn = at::vec::minimum(at::vec::maximum(cn, lo), hi);
    cn.store(c + k);
    (so * cn.tanh()).store(m + k);
  }
  for (; k < cells; ++k) {
    T cn = sigmoid(gf[k]) * c[k] + sigmoid(gi[k]) * std::tanh(gj[k]);
    if (clip) cn = std::min(std::max(cn, -bound), bound);
    c[k] = cn;
    m[k] = sigmoid(go[k]) * std::tanh(cn);
  }
}

// gates (T, B, 4C): each step's input term (x W_ih^T + b, the forget bias added to f's), onto which the
// step's recurrent product is added in place; weight_hh_t (P, 4C); weight_proj_t (C, P) or none (then
// P = C and the output is m itself); h (B, P) and c (B, C): the state, carried in place; lengths (B,)
// int64 or none: row b runs steps t < lengths[b], and past them its output is 0 and its state held
// (TensorFlow's dynamic_rnn with sequence_length); out (T, B, P): written.
void lstmp_forward_loop(Tensor gates, Tensor weight_hh_t, c10::optional<Tensor> weight_proj_t, Tensor h, Tensor c,
                        c10::optional<Tensor> lengths, c10::optional<double> cell_clip,
                        c10::optional<double> proj_clip, Tensor out) {
  TORCH_CHECK(gates.dim() == 3 && out.dim() == 3 && h.dim() == 2 && c.dim() == 2,
              "lstmp_forward_loop: gates and out must be (T, B, .), h and c (B, .)");
  TORCH_CHECK(gates.is_contiguous() && out.is_contiguous() && h.is_contiguous() && c.is_contiguous(),
              "lstmp_forward_loop: gates, out, h and c must be contiguous");
  const auto dtype = gates.scalar_type();
  TORCH_CHECK(out.scalar_type() == dtype && h.scalar_type() == dtype && c.scalar_type() == dtype &&
                  weight_hh_t.scalar_type() == dtype,
              "lstmp_forward_loop: every tensor must have one dtype");
  const int64_t steps = gates.size(0), batch = gates.size(1), cells = c.size(1), outputs = h.size(1);
  TORCH_CHECK(gates.size(2) == 4 * cells && out.size(0) == steps && out.size(1) == batch && out.size(2) == outputs &&
                  h.size(0) == batch && c.size(0) == batch,
              "lstmp_forward_loop: the shapes of gates (T, B, 4C), h (B, P), c (B, C) and out (T, B, P) disagree");
  TORCH_CHECK(weight_proj_t.has_value() || outputs == cells, "lstmp_forward_loop: without a projection P must be C");
  Tensor len;
  if (lengths.has_value()) {
    len = lengths->to(at::kLong).contiguous();
    TORCH_CHECK(len.dim() == 1 && len.size(0) == batch, "lstmp_forward_loop: lengths must be (B,)");
  }
  const Tensor m = weight_proj_t.has_value() ? at::empty({batch, cells}, c.options()) : Tensor();
  const int64_t grain = std::max<int64_t>(1, kValuesPerThread / (4 * cells));
  AT_DISPATCH_FLOATING_TYPES(dtype, "lstmp_forward_loop", [&] {
    const int64_t* lp = len.defined() ? len.const_data_ptr<int64_t>() : nullptr;
    const bool clip_c = cell_clip.has_value(), clip_h = proj_clip.has_value() && weight_proj_t.has_value();
    const scalar_t c_bound = clip_c ? static_cast<scalar_t>(*cell_clip) : scalar_t(0);
    const scalar_t h_bound = clip_h ? static_cast<scalar_t>(*proj_clip) : scalar_t(0);
    scalar_t* const cp = c.data_ptr<scalar_t>();
    scalar_t* const hp = h.data_ptr<scalar_t>();
    for (int64_t t = 0; t < steps; ++t) {
      Tensor g = gates.select(0, t);
      g.addmm_(h, weight_hh_t);
      Tensor o = out.select(0, t);
      const scalar_t* gp = g.const_data_ptr<scalar_t>();
      scalar_t* op = o.data_ptr<scalar_t>();
      // without a projection m is the output itself
      scalar_t* mp = m.defined() ? m.data_ptr<scalar_t>() : op;
      at::parallel_for(0, batch, grain, [&](int64_t first, int64_t end) {
        for (int64_t b = first; b < end; ++b) {
          if (lp && t >= lp[b]) {  // past its end: nothing read, the state held
            std::fill(mp + b * cells, mp + (b + 1) * cells, scalar_t(0));
            continue;
          }
          cell_row<scalar_t>(gp + b * 4 * cells, cp + b * cells, mp + b * cells, cells, clip_c, c_bound);
        }
      });
      if (m.defined()) at::mm_out(o, m, *weight_proj_t);
      // clip the output, zero it past each row's end, and carry it on as the state
      for (int64_t b = 0; b < batch; ++b) {
        scalar_t* row = op + b * outputs;
        if (lp && t >= lp[b]) {
          std::fill(row, row + outputs, scalar_t(0));
          continue;
        }
        if (clip_h) {
          for (int64_t k = 0; k < outputs; ++k) row[k] = std::min(std::max(row[k], -h_bound), h_bound);
        }
        std::copy(row, row + outputs, hp + b * outputs);
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY(highwaynet_lstmp_cpu, m) {
  m.def("lstmp_forward_loop(Tensor(a!) gates, Tensor weight_hh_t, Tensor? weight_proj_t, Tensor(b!) h, Tensor(c!) c, "
        "Tensor? lengths, float? cell_clip, float? proj_clip, Tensor(d!) out) -> ()");
}

TORCH_LIBRARY_IMPL(highwaynet_lstmp_cpu, CPU, m) { m.impl("lstmp_forward_loop", &lstmp_forward_loop); }
