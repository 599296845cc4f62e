// The dense reference works one token at a time, on purpose: the executors
// work on permuted, chunked, sliced row blocks, so a shared mistake in the
// batching would have to be made twice in different code to go unnoticed.
#include "moetrace/plan/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "random.h"

namespace moetrace::plan {
namespace {

Matrix random_matrix(std::int64_t rows, std::int64_t cols, double scale, SplitMix64& rng) {
  Matrix m = Matrix::zeros(rows, cols);
  for (double& v : m.data) v = rng.symmetric(scale);
  return m;
}

ExpertWeights random_ffn(std::int64_t model_dim, std::int64_t hidden, SplitMix64& rng) {
  // Uniform(-a, a) has variance a^2/3: a = sqrt(3/fan_in) keeps unit variance.
  return {random_matrix(model_dim, hidden, std::sqrt(3.0 / static_cast<double>(model_dim)), rng),
          random_matrix(hidden, model_dim, std::sqrt(3.0 / static_cast<double>(hidden)), rng)};
}

Matrix zeros_like(const Matrix& m) { return Matrix::zeros(m.rows, m.cols); }

// Top-k of one row of probabilities: the largest values, ties to the lower
// index (a stable sort on descending probability).
std::vector<int> top_k_of(const double* p, int experts, int k) {
  std::vector<int> idx(static_cast<std::size_t>(experts));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[a] > p[b]; });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

// y = gelu(x W1) W2 for one token; hidden receives x W1.
void ffn_token(const ExpertWeights& w, const double* x, std::vector<double>& hidden,
               std::vector<double>& y) {
  const std::int64_t m = w.w1.rows, h = w.w1.cols;
  hidden.assign(static_cast<std::size_t>(h), 0.0);
  for (std::int64_t j = 0; j < h; ++j) {
    double s = 0;
    for (std::int64_t i = 0; i < m; ++i) s += x[i] * w.w1.at(i, j);
    hidden[static_cast<std::size_t>(j)] = s;
  }
  y.assign(static_cast<std::size_t>(m), 0.0);
  for (std::int64_t o = 0; o < m; ++o) {
    double s = 0;
    for (std::int64_t j = 0; j < h; ++j) s += gelu(hidden[static_cast<std::size_t>(j)]) * w.w2.at(j, o);
    y[static_cast<std::size_t>(o)] = s;
  }
}

// Backward of ffn_token for one token: adds into grad, returns dx.
std::vector<double> ffn_token_backward(const ExpertWeights& w, const double* x,
                                       const std::vector<double>& hidden, const double* dy,
                                       ExpertWeights& grad) {
  const std::int64_t m = w.w1.rows, h = w.w1.cols;
  std::vector<double> dh(static_cast<std::size_t>(h));
  for (std::int64_t j = 0; j < h; ++j) {
    const double z = hidden[static_cast<std::size_t>(j)];
    const double a = gelu(z);
    double da = 0;
    for (std::int64_t o = 0; o < m; ++o) {
      grad.w2.at(j, o) += a * dy[o];
      da += dy[o] * w.w2.at(j, o);
    }
    dh[static_cast<std::size_t>(j)] = da * gelu_grad(z);
  }
  std::vector<double> dx(static_cast<std::size_t>(m), 0.0);
  for (std::int64_t i = 0; i < m; ++i) {
    double s = 0;
    for (std::int64_t j = 0; j < h; ++j) {
      grad.w1.at(i, j) += x[i] * dh[static_cast<std::size_t>(j)];
      s += dh[static_cast<std::size_t>(j)] * w.w1.at(i, j);
    }
    dx[static_cast<std::size_t>(i)] = s;
  }
  return dx;
}

}  // namespace

void add_scaled(ModelWeights& w, const ModelWeights& g, double scale) {
  auto axpy = [scale](Matrix& a, const Matrix& b) {
    for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] += scale * b.data[i];
  };
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    axpy(w.layers[l].gate, g.layers[l].gate);
    for (std::size_t e = 0; e < w.layers[l].experts.size(); ++e) {
      axpy(w.layers[l].experts[e].w1, g.layers[l].experts[e].w1);
      axpy(w.layers[l].experts[e].w2, g.layers[l].experts[e].w2);
    }
    axpy(w.layers[l].dense.w1, g.layers[l].dense.w1);
    axpy(w.layers[l].dense.w2, g.layers[l].dense.w2);
  }
}

Matrix Matrix::zeros(std::int64_t rows, std::int64_t cols) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.data.assign(static_cast<std::size_t>(rows * cols), 0.0);
  return m;
}

double gelu(double z) { return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0))); }

double gelu_grad(double z) {
  const double cdf = 0.5 * (1.0 + std::erf(z / std::sqrt(2.0)));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * 3.14159265358979323846);
  return cdf + z * pdf;
}

ModelWeights random_weights(const ModelShape& s, std::uint64_t seed) {
  SplitMix64 rng(seed);
  ModelWeights w;
  for (int l = 0; l < s.num_layers; ++l) {
    LayerWeights lw;
    // A gate scale of 3/sqrt(M) gives logits of spread ~1.7: clear top-k winners.
    lw.gate = random_matrix(s.model_dim, s.num_experts, 3.0 / std::sqrt(static_cast<double>(s.model_dim)), rng);
    for (int e = 0; e < s.num_experts; ++e)
      lw.experts.push_back(random_ffn(s.model_dim, s.expert_hidden, rng));
    if (s.dense_hidden > 0) lw.dense = random_ffn(s.model_dim, s.dense_hidden, rng);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

ModelWeights zero_like(const ModelWeights& w) {
  ModelWeights z;
  for (const auto& l : w.layers) {
    LayerWeights zl;
    zl.gate = zeros_like(l.gate);
    for (const auto& e : l.experts) zl.experts.push_back({zeros_like(e.w1), zeros_like(e.w2)});
    zl.dense = {zeros_like(l.dense.w1), zeros_like(l.dense.w2)};
    z.layers.push_back(std::move(zl));
  }
  return z;
}

TrainingData random_training_data(const ModelShape& s, int iterations,
                         const std::vector<std::int64_t>& tokens, std::uint64_t seed) {
  SplitMix64 rng(seed);
  TrainingData d;
  d.iterations = iterations;
  d.blocks = static_cast<int>(tokens.size());
  for (int it = 0; it < iterations; ++it)
    for (std::int64_t t : tokens) {
      Matrix x = Matrix::zeros(t, s.model_dim);
      for (double& v : x.data) v = rng.normal();
      d.inputs.push_back(std::move(x));
    }
  for (int it = 0; it < iterations; ++it)
    for (std::int64_t t : tokens) {
      Matrix g = Matrix::zeros(t, s.model_dim);
      for (double& v : g.data) v = rng.normal();
      d.output_grads.push_back(std::move(g));
    }
  return d;
}

Matrix moe_layer_forward(const LayerWeights& w, int top_k, const Matrix& x, MoeLayerCache* cache) {
  const std::int64_t tokens = x.rows, m = x.cols;
  const int experts = static_cast<int>(w.experts.size());
  MoeLayerCache c;
  c.x = x;
  c.probs = Matrix::zeros(tokens, experts);
  Matrix y = Matrix::zeros(tokens, m);
  std::vector<double> hidden, out;
  for (std::int64_t t = 0; t < tokens; ++t) {
    double* p = c.probs.row(t);
    double max_logit = -std::numeric_limits<double>::infinity();
    for (int e = 0; e < experts; ++e) {
      double s = 0;
      for (std::int64_t i = 0; i < m; ++i) s += x.at(t, i) * w.gate.at(i, e);
      p[e] = s;
      max_logit = std::max(max_logit, s);
    }
    double sum = 0;
    for (int e = 0; e < experts; ++e) {
      p[e] = std::exp(p[e] - max_logit);
      sum += p[e];
    }
    for (int e = 0; e < experts; ++e) p[e] /= sum;
    const auto chosen = top_k_of(p, experts, top_k);
    c.experts.push_back(chosen);
    c.weights.emplace_back();
    c.hidden.emplace_back();
    c.out.emplace_back();
    for (int e : chosen) {
      ffn_token(w.experts[static_cast<std::size_t>(e)], x.row(t), hidden, out);
      const double weight = p[e];
      for (std::int64_t o = 0; o < m; ++o) y.at(t, o) += weight * out[static_cast<std::size_t>(o)];
      c.weights.back().push_back(weight);
      c.hidden.back().push_back(hidden);
      c.out.back().push_back(out);
    }
  }
  if (cache) *cache = std::move(c);
  return y;
}

Matrix moe_layer_backward(const LayerWeights& w, const MoeLayerCache& c, const Matrix& dy,
                          LayerWeights& grad) {
  const std::int64_t tokens = c.x.rows, m = c.x.cols;
  const int experts = static_cast<int>(w.experts.size());
  Matrix dx = Matrix::zeros(tokens, m);
  std::vector<double> d_prob(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::fill(d_prob.begin(), d_prob.end(), 0.0);
    for (std::size_t s = 0; s < c.experts[static_cast<std::size_t>(t)].size(); ++s) {
      const int e = c.experts[static_cast<std::size_t>(t)][s];
      const double weight = c.weights[static_cast<std::size_t>(t)][s];
      const auto& out = c.out[static_cast<std::size_t>(t)][s];
      double dw = 0;
      std::vector<double> d_out(static_cast<std::size_t>(m));
      for (std::int64_t o = 0; o < m; ++o) {
        dw += dy.at(t, o) * out[static_cast<std::size_t>(o)];
        d_out[static_cast<std::size_t>(o)] = weight * dy.at(t, o);
      }
      d_prob[static_cast<std::size_t>(e)] = dw;
      const auto dxe = ffn_token_backward(w.experts[static_cast<std::size_t>(e)], c.x.row(t),
                                          c.hidden[static_cast<std::size_t>(t)][s], d_out.data(),
                                          grad.experts[static_cast<std::size_t>(e)]);
      for (std::int64_t i = 0; i < m; ++i) dx.at(t, i) += dxe[static_cast<std::size_t>(i)];
    }
    // Softmax Jacobian: d logit_j = p_j (d p_j - sum_i p_i d p_i).
    const double* p = c.probs.row(t);
    double dot = 0;
    for (int e = 0; e < experts; ++e) dot += p[e] * d_prob[static_cast<std::size_t>(e)];
    for (int e = 0; e < experts; ++e) {
      const double d_logit = p[e] * (d_prob[static_cast<std::size_t>(e)] - dot);
      for (std::int64_t i = 0; i < m; ++i) {
        grad.gate.at(i, e) += c.x.at(t, i) * d_logit;
        dx.at(t, i) += d_logit * w.gate.at(i, e);
      }
    }
  }
  return dx;
}

Matrix dense_ffn_forward(const ExpertWeights& w, const Matrix& x, Matrix* hidden) {
  Matrix y = Matrix::zeros(x.rows, x.cols);
  Matrix hid = Matrix::zeros(x.rows, w.w1.cols);
  std::vector<double> h, out;
  for (std::int64_t t = 0; t < x.rows; ++t) {
    ffn_token(w, x.row(t), h, out);
    std::copy(h.begin(), h.end(), hid.row(t));
    std::copy(out.begin(), out.end(), y.row(t));
  }
  if (hidden) *hidden = std::move(hid);
  return y;
}

Matrix dense_ffn_backward(const ExpertWeights& w, const Matrix& x, const Matrix& hidden,
                          const Matrix& dy, ExpertWeights& grad) {
  Matrix dx = Matrix::zeros(x.rows, x.cols);
  for (std::int64_t t = 0; t < x.rows; ++t) {
    const std::vector<double> h(hidden.row(t), hidden.row(t) + hidden.cols);
    const auto d = ffn_token_backward(w, x.row(t), h, dy.row(t), grad);
    std::copy(d.begin(), d.end(), dx.row(t));
  }
  return dx;
}

ReferenceResult reference_train(const ModelShape& shape, const ModelWeights& initial,
                                const TrainingData& data) {
  ReferenceResult r;
  ModelWeights w = initial;
  r.load = ExpertLoad::zeros(data.iterations, shape.num_layers, data.blocks, shape.num_experts,
                             shape.top_k);
  const bool dense = shape.dense_hidden > 0;
  for (int it = 0; it < data.iterations; ++it) {
    ModelWeights grad = zero_like(w);
    for (int b = 0; b < data.blocks; ++b) {
      const Matrix& x0 = data.input(it, b);
      r.load.tokens_of(it, b) = x0.rows;
      std::vector<MoeLayerCache> caches(static_cast<std::size_t>(shape.num_layers));
      std::vector<Matrix> moe_out(caches.size()), dense_hidden(caches.size());
      Matrix x = x0;
      for (int l = 0; l < shape.num_layers; ++l) {
        const auto& lw = w.layers[static_cast<std::size_t>(l)];
        Matrix y = moe_layer_forward(lw, shape.top_k, x, &caches[static_cast<std::size_t>(l)]);
        for (const auto& chosen : caches[static_cast<std::size_t>(l)].experts)
          for (int e : chosen) ++r.load.count(it, l, b, e);
        if (dense) {
          moe_out[static_cast<std::size_t>(l)] = y;
          y = dense_ffn_forward(lw.dense, y, &dense_hidden[static_cast<std::size_t>(l)]);
        }
        x = std::move(y);
      }
      r.outputs.push_back(x);
      Matrix d = data.output_grad(it, b);
      for (int l = shape.num_layers - 1; l >= 0; --l) {
        const auto& lw = w.layers[static_cast<std::size_t>(l)];
        auto& lg = grad.layers[static_cast<std::size_t>(l)];
        if (dense)
          d = dense_ffn_backward(lw.dense, moe_out[static_cast<std::size_t>(l)],
                                 dense_hidden[static_cast<std::size_t>(l)], d, lg.dense);
        d = moe_layer_backward(lw, caches[static_cast<std::size_t>(l)], d, lg);
      }
      r.input_grads.push_back(std::move(d));
    }
    add_scaled(w, grad, -shape.learning_rate);
    r.grads.push_back(std::move(grad));
  }
  r.final_weights = std::move(w);
  return r;
}

double relative_error(const Matrix& a, const Matrix& b) {
  if (a.rows != b.rows || a.cols != b.cols) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    if (!std::isfinite(a.data[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::abs(a.data[i] - b.data[i]));
    norm = std::max(norm, std::abs(b.data[i]));
  }
  return norm > 0 ? diff / norm : diff;
}

}  // namespace moetrace::plan
