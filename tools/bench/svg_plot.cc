// SVG writers (see svg_plot.h).
#include "tools/bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvtier::bench {
namespace {

const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

struct Svg {
  FILE* f;
  void Text(double x, double y, const std::string& s, const char* anchor = "start", int size = 12) {
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='%d' text-anchor='%s'>%s</text>\n", x, y, size,
            anchor, Escape(s).c_str());
  }
  // Text read bottom to top, centred on (x, y): a y-axis label.
  void VText(double x, double y, const std::string& s, int size = 12) {
    fprintf(f,
            "<text x='%.1f' y='%.1f' font-size='%d' text-anchor='middle' "
            "transform='rotate(-90 %.1f %.1f)'>%s</text>\n",
            x, y, size, x, y, Escape(s).c_str());
  }
  void Line(double x1, double y1, double x2, double y2, const char* color, double width = 1) {
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='%.1f'/>\n",
            x1, y1, x2, y2, color, width);
  }
};

}  // namespace

Status WriteTtftCdfSvg(const std::string& path, const std::vector<SystemResult>& results,
                       const std::string& title) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) return Status::Errorf("%s: cannot write the plot (check --output)", path.c_str());
  const double w = 900, h = 520, l = 70, r = 220, t = 40, b = 60;
  const double pw = w - l - r, ph = h - t - b;
  double lo = 1e300, hi = 0;
  for (const SystemResult& res : results) {
    for (const RequestRow& row : res.rows) {
      if (row.ttft <= 0) continue;
      lo = std::min(lo, row.ttft);
      hi = std::max(hi, row.ttft);
    }
  }
  if (hi <= 0) lo = 0.001, hi = 1;
  const double dlo = std::floor(std::log10(lo)), dhi = std::max(dlo + 1, std::ceil(std::log10(hi)));
  auto x_of = [&](double v) { return l + (std::log10(v) - dlo) / (dhi - dlo) * pw; };
  auto y_of = [&](double q) { return t + (1 - q) * ph; };
  Svg s{f};
  fprintf(f,
          "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
          "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
          w, h);
  s.Text(w / 2, 22, title, "middle", 14);
  for (double d = dlo; d <= dhi; ++d) {
    const double x = x_of(std::pow(10, d));
    s.Line(x, t, x, t + ph, "#dddddd");
    char label[32];
    snprintf(label, sizeof label, "%g s", std::pow(10, d));
    s.Text(x, t + ph + 18, label, "middle");
  }
  for (int i = 0; i <= 4; ++i) {
    const double y = y_of(i / 4.0);
    s.Line(l, y, l + pw, y, "#dddddd");
    s.Text(l - 8, y + 4, std::to_string(i * 25) + "%", "end");
  }
  s.Line(l, t + ph, l + pw, t + ph, "black");
  s.Line(l, t, l, t + ph, "black");
  s.Text(l + pw / 2, h - 15, "time to first token (log scale)", "middle");
  s.VText(22, t + ph / 2, "share of requests");
  for (size_t i = 0; i < results.size(); ++i) {
    std::vector<double> v;
    for (const RequestRow& row : results[i].rows) {
      if (row.ttft > 0) v.push_back(row.ttft);
    }
    std::sort(v.begin(), v.end());
    const char* color = kColors[i % std::size(kColors)];
    if (!v.empty()) {
      fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", color);
      fprintf(f, "%.1f,%.1f ", x_of(v[0]), y_of(0));
      for (size_t k = 0; k < v.size(); ++k) {
        fprintf(f, "%.1f,%.1f %.1f,%.1f ", x_of(v[k]), y_of(double(k) / v.size()), x_of(v[k]),
                y_of(double(k + 1) / v.size()));
      }
      fprintf(f, "'/>\n");
    }
    const double ly = t + 10 + i * 20;
    s.Line(l + pw + 15, ly, l + pw + 40, ly, color, 3);
    s.Text(l + pw + 46, ly + 4, results[i].name);
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? Status::Ok() : Status::Errorf("%s: write failed", path.c_str());
}

Status WriteOccupancySvg(const std::string& path, const std::vector<SystemResult>& results,
                         const std::string& title) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) return Status::Errorf("%s: cannot write the plot (check --output)", path.c_str());
  const int cols = 3;
  const int rows = std::max<int>(1, (results.size() + cols - 1) / cols);
  const double cw = 360, chh = 220, top = 50;
  const double w = cols * cw, h = top + rows * chh + 30;
  Svg s{f};
  fprintf(f,
          "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
          "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
          w, h);
  s.Text(w / 2, 22, title, "middle", 14);
  const char* tier_color[3] = {"#d62728", "#1f77b4", "#2ca02c"};
  const char* tier_name[3] = {"device", "host", "disk"};
  for (int i = 0; i < 3; ++i) {
    s.Line(20 + i * 110, 38, 45 + i * 110, 38, tier_color[i], 3);
    s.Text(50 + i * 110, 42, tier_name[i]);
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const SystemResult& res = results[i];
    const double ox = (i % cols) * cw + 55, oy = top + (i / cols) * chh + 20;
    const double pw = cw - 75, ph = chh - 60;
    double tmax = 1, ymax = 1;
    for (const Occupancy& o : res.occupancy) {
      tmax = std::max(tmax, o.t);
      ymax = std::max<double>(ymax, std::max({o.device, o.host, o.disk}) / 1e9);
    }
    s.Text(ox + pw / 2, oy - 6, res.name, "middle");
    s.Line(ox, oy + ph, ox + pw, oy + ph, "black");
    s.Line(ox, oy, ox, oy + ph, "black");
    char label[48];
    snprintf(label, sizeof label, "%.0f GB", ymax);
    s.Text(ox - 4, oy + 10, label, "end", 10);
    s.Text(ox - 4, oy + ph, "0", "end", 10);
    snprintf(label, sizeof label, "%.0f s", tmax);
    s.Text(ox + pw, oy + ph + 14, label, "end", 10);
    for (int tier = 0; tier < 3; ++tier) {
      fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", tier_color[tier]);
      for (const Occupancy& o : res.occupancy) {
        const double v = (tier == 0 ? o.device : tier == 1 ? o.host : o.disk) / 1e9;
        fprintf(f, "%.1f,%.1f ", ox + o.t / tmax * pw, oy + ph - v / ymax * ph);
      }
      fprintf(f, "'/>\n");
    }
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? Status::Ok() : Status::Errorf("%s: write failed", path.c_str());
}

}  // namespace kvtier::bench
