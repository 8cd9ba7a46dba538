#include "codegen/ref/conv_loops.h"

#include <algorithm>
#include <vector>

namespace tessel::ref {

namespace {

// Calls f(n, group, oc, ic, oy, ox, ky, kx, iy, ix) for every product term
// of the convolution that falls inside the input (the padding reads zeros).
// All three directions are the same sum over the same index set.
template <class F> void for_each_term(const ir::ConvGeometry& g, F&& f) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t gr = 0; gr < g.groups; ++gr)
      for (int64_t oc = gr * og; oc < (gr + 1) * og; ++oc)
        for (int64_t ic = 0; ic < cg; ++ic)
          for (int64_t oy = 0; oy < g.oh; ++oy)
            for (int64_t ky = 0; ky < g.kh; ++ky) {
              const int64_t iy = oy * g.stride_h - g.pad_t + ky * g.dilation_h;
              if (iy < 0 || iy >= g.h) continue;
              for (int64_t ox = 0; ox < g.ow; ++ox)
                for (int64_t kx = 0; kx < g.kw; ++kx) {
                  const int64_t ix = ox * g.stride_w - g.pad_l + kx * g.dilation_w;
                  if (ix < 0 || ix >= g.w) continue;
                  f(((n * g.c + gr * cg + ic) * g.h + iy) * g.w + ix,      // x / gx
                    ((oc * cg + ic) * g.kh + ky) * g.kw + kx,              // w / gw
                    ((n * g.o + oc) * g.oh + oy) * g.ow + ox);             // y / gy
                }
            }
}

}  // namespace

template <class T> void conv_forward(const ir::ConvGeometry& g, const T* x, const T* w, T* y) {
  std::vector<double> acc(static_cast<size_t>(g.n * g.o * g.oh * g.ow), 0.0);
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc[static_cast<size_t>(yi)] += double(x[xi]) * double(w[wi]); });
  std::transform(acc.begin(), acc.end(), y, [](double v) { return static_cast<T>(v); });
}

template <class T> void conv_backward_data(const ir::ConvGeometry& g, const T* gy, const T* w, T* gx) {
  std::vector<double> acc(static_cast<size_t>(g.n * g.c * g.h * g.w), 0.0);
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc[static_cast<size_t>(xi)] += double(gy[yi]) * double(w[wi]); });
  std::transform(acc.begin(), acc.end(), gx, [](double v) { return static_cast<T>(v); });
}

template <class T> void conv_backward_weights(const ir::ConvGeometry& g, const T* x, const T* gy, T* gw) {
  std::vector<double> acc(static_cast<size_t>(g.o * (g.c / g.groups) * g.kh * g.kw), 0.0);
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc[static_cast<size_t>(wi)] += double(x[xi]) * double(gy[yi]); });
  std::transform(acc.begin(), acc.end(), gw, [](double v) { return static_cast<T>(v); });
}

template void conv_forward<float>(const ir::ConvGeometry&, const float*, const float*, float*);
template void conv_forward<double>(const ir::ConvGeometry&, const double*, const double*, double*);
template void conv_backward_data<float>(const ir::ConvGeometry&, const float*, const float*, float*);
template void conv_backward_data<double>(const ir::ConvGeometry&, const double*, const double*, double*);
template void conv_backward_weights<float>(const ir::ConvGeometry&, const float*, const float*, float*);
template void conv_backward_weights<double>(const ir::ConvGeometry&, const double*, const double*, double*);

}  // namespace tessel::ref
