#include "anchor/run_report/report_html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "anchor/common/utf8.hpp"
#include "anchor/run_report/report_writer.hpp"

namespace anchor::run_report {
namespace {

using json = nlohmann::json;

// Text for HTML content and attribute values: the JUnit file's escaping.
std::string esc(std::string_view raw) { return detail::markup_escape(std::string(raw)); }

std::string text(const json& v) {
  if (v.is_string()) return esc(v.get_ref<const std::string&>());
  if (v.is_null()) return "n/a";
  return esc(v.dump());
}

const json& field(const json& j, const char* key) {
  static const json null;
  if (!j.is_object()) return null;
  auto it = j.find(key);
  return it == j.end() ? null : *it;
}

std::optional<double> number(const json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

std::string num(double v, int significant = 4) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  return buf;
}

// SVG coordinates, to a tenth of a pixel.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// About five round tick values spanning [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && out.size() < 12; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

// The series' colours are theirs alone (the browser test counts their pixels);
// bars, markers and the time line use others.
constexpr const char* kColourA = "#1f5fa8";       // worker A
constexpr const char* kColourB = "#d1495b";       // worker B
constexpr const char* kColourMemory = "#7b5ea7";  // the memory bars
// (The save/kill marker, the device total and SIGKILL are #b5651d, in kStyle.)

// At most this many points of a series are drawn (every k-th, the last kept),
// a dot on each only when there are few.
constexpr std::size_t kMaxPoints = 400, kMaxDots = 60;

struct Series {
  std::string name, color;
  bool dashed = false;
  std::vector<std::pair<double, double>> points;
};
struct Marker {
  double x;
  std::string label;
};

constexpr double kW = 680, kH = 240, kLeft = 64, kRight = 16, kTop = 16, kBottom = 40;

// A line chart: x and y axes with ticks, one polyline per series (a dot at
// each point), vertical markers, a legend. `id` names it for the page's test.
std::string line_chart(const std::string& id, const std::string& title, const std::vector<Series>& series,
                       const std::string& xlabel, const std::string& ylabel, const std::vector<Marker>& markers = {}) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double x0 = kInf, x1 = -kInf, y0 = kInf, y1 = -kInf;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::ostringstream o;
  o << "<figure><figcaption>" << esc(title) << "</figcaption>";
  if (!std::isfinite(x0)) return o.str() + "<p class=\"none\">no data in the report</p></figure>";
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    const double pad = y0 == 0 ? 1 : std::abs(y0) * 0.05;
    y0 -= pad, y1 += pad;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto Y = [&](double y) { return kH - kBottom - (y - y0) / (y1 - y0) * (kH - kTop - kBottom); };
  o << "<svg class=\"chart\" data-chart=\"" << esc(id) << "\" viewBox=\"0 0 " << kW << " " << kH
    << "\" role=\"img\" aria-label=\"" << esc(title) << "\">";
  for (double t : ticks(y0, y1))
    o << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << kW - kRight << "\" y1=\"" << px(Y(t)) << "\" y2=\""
      << px(Y(t)) << "\"/><text class=\"tick\" x=\"" << kLeft - 4 << "\" y=\"" << px(Y(t) + 4)
      << "\" text-anchor=\"end\">" << num(t) << "</text>";
  for (double t : ticks(x0, x1))
    o << "<text class=\"tick\" x=\"" << px(X(t)) << "\" y=\"" << kH - kBottom + 14 << "\" text-anchor=\"middle\">"
      << num(t) << "</text>";
  o << "<line class=\"axis\" x1=\"" << kLeft << "\" x2=\"" << kW - kRight << "\" y1=\"" << kH - kBottom << "\" y2=\""
    << kH - kBottom << "\"/><line class=\"axis\" x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << kTop
    << "\" y2=\"" << kH - kBottom << "\"/>";
  o << "<text class=\"label\" x=\"" << (kLeft + kW - kRight) / 2 << "\" y=\"" << kH - 6 << "\" text-anchor=\"middle\">"
    << esc(xlabel) << "</text><text class=\"label\" transform=\"rotate(-90)\" x=\"" << -(kTop + kH - kBottom) / 2
    << "\" y=\"14\" text-anchor=\"middle\">" << esc(ylabel) << "</text>";
  for (const auto& m : markers) {
    if (m.x < x0 || m.x > x1) continue;
    o << "<line class=\"marker\" x1=\"" << px(X(m.x)) << "\" x2=\"" << px(X(m.x)) << "\" y1=\"" << kTop << "\" y2=\""
      << kH - kBottom << "\"/><text class=\"marker-label\" x=\"" << px(X(m.x) + 4) << "\" y=\"" << kTop + 10 << "\">"
      << esc(m.label) << "</text>";
  }
  double legend_x = kLeft + 8;
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    std::vector<std::pair<double, double>> shown;
    const std::size_t every = (s.points.size() + kMaxPoints - 1) / kMaxPoints;
    for (std::size_t i = 0; i < s.points.size(); ++i)
      if (i % every == 0 || i + 1 == s.points.size()) shown.push_back(s.points[i]);
    o << "<polyline class=\"series\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
    for (const auto& [x, y] : shown) o << px(X(x)) << "," << px(Y(y)) << " ";
    o << "\"/>";
    if (shown.size() <= kMaxDots)
      for (const auto& [x, y] : shown)
        o << "<circle cx=\"" << px(X(x)) << "\" cy=\"" << px(Y(y)) << "\" r=\"2.5\" fill=\"" << s.color << "\"><title>"
          << esc(s.name) << ": step " << num(x, 10) << ", " << num(y, 6) << "</title></circle>";
    o << "<rect x=\"" << px(legend_x) << "\" y=\"" << kH - kBottom - 16 << "\" width=\"12\" height=\"4\" fill=\""
      << s.color << "\"/><text class=\"legend\" x=\"" << px(legend_x + 16) << "\" y=\"" << kH - kBottom - 11 << "\">"
      << esc(s.name) << "</text>";
    legend_x += 24 + 7.0 * static_cast<double>(s.name.size());
  }
  o << "</svg></figure>";
  return o.str();
}

// Horizontal bars, one per row, each split into coloured parts; `capacity`
// (when > 0) is drawn as a line the bars are measured against.
struct Bar {
  std::string label;
  std::vector<std::pair<std::string, double>> parts;  // legend name, value
};
std::string bar_chart(const std::string& id, const std::string& title, const std::vector<Bar>& bars,
                      const std::vector<std::string>& colors, const std::string& unit, double scale,
                      double capacity = 0, const std::string& capacity_label = "") {
  std::ostringstream o;
  o << "<figure><figcaption>" << esc(title) << "</figcaption>";
  double most = capacity;
  for (const auto& b : bars) {
    double sum = 0;
    for (const auto& p : b.parts) sum += std::max(0.0, p.second);
    most = std::max(most, sum);
  }
  if (bars.empty() || !(most > 0)) return o.str() + "<p class=\"none\">no data in the report</p></figure>";
  const double left = 150, right = 90, row = 22, top = 8;
  const double h = top + row * static_cast<double>(bars.size()) + 30;
  auto X = [&](double v) { return left + v / most * (kW - left - right); };
  o << "<svg class=\"chart\" data-chart=\"" << esc(id) << "\" viewBox=\"0 0 " << kW << " " << px(h)
    << "\" role=\"img\" aria-label=\"" << esc(title) << "\">";
  double y = top;
  for (const auto& b : bars) {
    o << "<text class=\"tick\" x=\"" << left - 6 << "\" y=\"" << px(y + 14) << "\" text-anchor=\"end\">" << esc(b.label)
      << "</text>";
    double x = 0, sum = 0;
    for (std::size_t i = 0; i < b.parts.size(); ++i) {
      const double v = std::max(0.0, b.parts[i].second);
      o << "<rect class=\"bar\" x=\"" << px(X(x)) << "\" y=\"" << px(y + 3) << "\" width=\"" << px(X(x + v) - X(x))
        << "\" height=\"" << row - 6 << "\" fill=\"" << colors[i % colors.size()] << "\"><title>" << esc(b.label)
        << ", " << esc(b.parts[i].first) << ": " << num(v / scale) << " " << esc(unit) << "</title></rect>";
      x += v;
      sum += v;
    }
    o << "<text class=\"tick\" x=\"" << px(X(x) + 4) << "\" y=\"" << px(y + 14) << "\">" << num(sum / scale) << " "
      << esc(unit) << "</text>";
    y += row;
  }
  if (capacity > 0)
    o << "<line class=\"marker\" x1=\"" << px(X(capacity)) << "\" x2=\"" << px(X(capacity)) << "\" y1=\"" << top
      << "\" y2=\"" << px(y) << "\"/><text class=\"marker-label\" x=\"" << px(X(capacity)) << "\" y=\"" << px(y + 14)
      << "\" text-anchor=\"end\">" << esc(capacity_label) << "</text>";
  double lx = left;
  if (bars.front().parts.size() > 1)
    for (std::size_t i = 0; i < bars.front().parts.size(); ++i) {
      const std::string& name = bars.front().parts[i].first;
      o << "<rect x=\"" << px(lx) << "\" y=\"" << px(h - 14) << "\" width=\"12\" height=\"8\" fill=\""
        << colors[i % colors.size()] << "\"/><text class=\"legend\" x=\"" << px(lx + 16) << "\" y=\"" << px(h - 6)
        << "\">" << esc(name) << "</text>";
      lx += 30 + 7.0 * static_cast<double>(name.size());
    }
  o << "</svg></figure>";
  return o.str();
}

// A step list of report.json (steps.train, .reference, .resume) as points of
// `key` against the step as the console counts it (from 1): `first` is what a
// step's recorded number needs added (1 in a built-in pilot's report from before
// steps.numbered_from, which counted from 0).
std::vector<std::pair<double, double>> points(const std::vector<StepRow>& steps, Opt<double> StepRow::*key,
                                              double first) {
  std::vector<std::pair<double, double>> out;
  for (const auto& s : steps) {
    const auto& v = s.*key;
    if (s.step && v && std::isfinite(*v)) out.emplace_back(static_cast<double>(*s.step) + first, *v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string training_charts(const RunReport& report) {
  const Steps& steps = or_empty(report.steps);
  const auto first = static_cast<double>(step_number_offset(report));
  // Worker A's steps: those before its save (steps.train) and after (steps.reference).
  std::vector<StepRow> a = or_empty(steps.train);
  a.insert(a.end(), or_empty(steps.reference).begin(), or_empty(steps.reference).end());
  const std::vector<StepRow>& b = steps.resume ? *steps.resume : or_empty(steps.resumed);
  std::vector<Marker> markers;
  if (report.resume && report.resume->saved_step) {
    const auto saved = static_cast<double>(*report.resume->saved_step);
    markers.push_back({saved + 0.5, "saved at step " + num(saved, 10) + ", killed, B restored it"});
  }
  std::ostringstream o;
  auto both = [&](Opt<double> StepRow::*key) {
    return std::vector<Series>{{"worker A (uninterrupted)", kColourA, false, points(a, key, first)},
                               {"worker B (resumed)", kColourB, true, points(b, key, first)}};
  };
  o << line_chart("loss", "Training loss: worker A and the resumed worker B", both(&StepRow::loss), "step", "loss",
                  markers);
  o << "<div class=\"row\">"
    << line_chart("grad_norm", "Gradient norm", both(&StepRow::grad_norm), "step", "grad norm", markers)
    << line_chart("lr", "Learning rate", both(&StepRow::lr), "step", "lr", markers) << "</div>";
  // The step time split of worker A's steps; more than 30 steps, as the means of 30 runs of them.
  struct Split {
    double step, data, compute, comm;
  };
  const auto finite = [](const Opt<double>& v) { return v && std::isfinite(*v) ? *v : 0.0; };
  std::vector<Split> split;
  for (const auto& s : a)
    if (s.step)
      split.push_back(
          {static_cast<double>(*s.step) + first, finite(s.data_wait_s), finite(s.compute_s), finite(s.comm_s)});
  constexpr std::size_t kBars = 30;
  const std::size_t per = std::max<std::size_t>(1, (split.size() + kBars - 1) / kBars);
  std::vector<Bar> bars;
  for (std::size_t i = 0; i < split.size(); i += per) {
    const std::size_t n = std::min(per, split.size() - i);
    const auto count = static_cast<double>(n);
    Split mean{split[i].step, 0, 0, 0};
    for (std::size_t j = i; j < i + n; ++j)
      mean.data += split[j].data / count, mean.compute += split[j].compute / count, mean.comm += split[j].comm / count;
    bars.push_back({n == 1 ? "step " + num(mean.step, 10)
                           : "steps " + num(split[i].step, 10) + "-" + num(split[i + n - 1].step, 10) + " (mean)",
                    {{"data wait", mean.data}, {"compute", mean.compute}, {"communication", mean.comm}}});
  }
  o << bar_chart("step_time", "Step time, worker A: data wait, compute, communication", bars,
                 {"#e0a458", "#3d9fb0", "#6a994e"}, "s", 1);
  return o.str();
}

std::string memory_chart(const RunReport& report) {
  const auto& m = report.measurements;
  const MemoryFigures& mem = m ? or_empty(m->memory) : or_empty(Opt<MemoryFigures>());
  std::vector<Bar> bars;
  if (mem.stages)
    for (const auto& name : detail::memory_stage_order(report)) {
      const StageMemory& v = mem.stages->at(name);
      // The device's own figure when there is one (reserved: what the allocator holds), else allocated.
      auto peak = v.peak_reserved_bytes;
      if (!peak || *peak < 0) peak = v.peak_allocated_bytes;
      if (!peak || *peak < 0) peak = v.peak_rss_bytes;  // a program on the CPU: the process's peak RSS
      if (peak && *peak >= 0) bars.push_back({name, {{"peak", static_cast<double>(*peak)}}});
    }
  const auto total = mem.device_total_bytes;
  const std::string title =
      "Peak memory per stage (" +
      std::string(total ? "against the device's " + detail::bytes_text(static_cast<double>(*total))
                        : "no device total: a CPU run") +
      ")";
  return bar_chart("memory", title, bars, {kColourMemory}, "MB", 1e6, total ? static_cast<double>(*total) : 0.0,
                   "device total");
}

// The stages of every process on one time line, from trace.json's spans.
std::string timeline(const json& trace) {
  std::ostringstream o;
  o << "<figure><figcaption>Stages of every process (trace.json; open it in ui.perfetto.dev for detail)"
    << "</figcaption>";
  std::map<int, std::string> names;
  std::vector<const json*> spans, moments;
  double end = 0;
  if (const json& events = field(trace, "traceEvents"); events.is_array())
    for (const auto& e : events) {
      const std::string ph = field(e, "ph").is_string() ? field(e, "ph").get<std::string>() : "";
      const auto pid = number(field(e, "pid"));
      if (!pid) continue;
      if (ph == "M" && field(e, "name") == "process_name")
        names[static_cast<int>(*pid)] = field(field(e, "args"), "name").is_string()
                                            ? field(field(e, "args"), "name").get<std::string>()
                                            : "process";
      const auto ts = number(field(e, "ts")), dur = number(field(e, "dur"));
      if (ph == "X" && field(e, "cat") == "stage" && ts && dur) {
        spans.push_back(&e);
        end = std::max(end, *ts + *dur);
      }
      if (ph == "i" && field(e, "name") == "sigkill_sent" && field(e, "s") == "g" && ts) moments.push_back(&e);
    }
  if (spans.empty()) return o.str() + "<p class=\"none\">no stage events (events.jsonl) in the run</p></figure>";
  double begin = end;  // the earliest start: the time line's 0
  for (const auto* e : spans) begin = std::min(begin, *number(field(*e, "ts")));
  if (!(end > begin)) end = begin + 1;
  std::map<int, int> lane;  // pid -> row, in pid order
  for (const auto* e : spans) lane.emplace(static_cast<int>(*number(field(*e, "pid"))), 0);
  int r = 0;
  for (auto& [pid, row] : lane) row = r++;
  const double left = 170, right = 16, row = 28, top = 8;
  const double h = top + row * static_cast<double>(lane.size()) + 24;
  auto X = [&](double us) { return left + (us - begin) / (end - begin) * (kW - left - right); };
  o << "<svg class=\"chart\" data-chart=\"timeline\" viewBox=\"0 0 " << kW << " " << px(h)
    << "\" role=\"img\" aria-label=\"stage time line\">";
  for (const auto& [pid, row_no] : lane)
    o << "<text class=\"tick\" x=\"" << left - 6 << "\" y=\"" << px(top + row * row_no + 17)
      << "\" text-anchor=\"end\">" << esc(names.count(pid) ? names[pid] : "process " + std::to_string(pid))
      << "</text>";
  const char* palette[] = {"#3d9fb0", "#e0a458", "#6a994e", "#8d6e63", "#5c7cab", "#b56576"};
  std::map<std::string, int> color_of;
  for (const auto* e : spans) {
    const int row_no = lane[static_cast<int>(*number(field(*e, "pid")))];
    const std::string name = field(*e, "name").is_string() ? field(*e, "name").get<std::string>() : "stage";
    const double ts = *number(field(*e, "ts")), dur = *number(field(*e, "dur"));
    const auto c = color_of.emplace(name, static_cast<int>(color_of.size())).first->second;
    const std::string status =
        field(field(*e, "args"), "status").is_string() ? field(field(*e, "args"), "status").get<std::string>() : "";
    o << "<rect class=\"span\" x=\"" << px(X(ts)) << "\" y=\"" << px(top + row * row_no + 4) << "\" width=\""
      << px(std::max(1.0, X(ts + dur) - X(ts))) << "\" height=\"" << row - 8 << "\" fill=\""
      << (status == "passed" || status.empty() ? palette[c % 6] : "#9e2a2b") << "\"><title>" << esc(name) << ": "
      << num(dur / 1e6) << " s" << (status.empty() ? "" : ", " + esc(status)) << "</title></rect>";
    // The name on the bar when it fits (about 6.5 px a character at 11 px).
    if (X(ts + dur) - X(ts) > 6.5 * static_cast<double>(name.size()) + 6)
      o << "<text class=\"on-bar\" x=\"" << px(X(ts) + 3) << "\" y=\"" << px(top + row * row_no + 18) << "\">"
        << esc(name) << "</text>";
  }
  for (const auto* e : moments) {
    if (*number(field(*e, "ts")) < begin || *number(field(*e, "ts")) > end) continue;
    const double x = X(*number(field(*e, "ts")));
    o << "<line class=\"marker\" x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << top << "\" y2=\"" << px(h - 24)
      << "\"/><text class=\"marker-label\" x=\"" << px(x + 3) << "\" y=\"" << px(h - 12) << "\">SIGKILL</text>";
  }
  o << "<text class=\"tick\" x=\"" << left << "\" y=\"" << px(h - 2) << "\">0 s</text><text class=\"tick\" x=\""
    << kW - right << "\" y=\"" << px(h - 2) << "\" text-anchor=\"end\">" << num((end - begin) / 1e6)
    << " s</text></svg></figure>";
  return o.str();
}

// A table cell: text escaped, a flag as yes/NO, nothing for what the report lacks.
std::string cell(const Opt<std::string>& v) { return v ? esc(*v) : ""; }
std::string cell(const Opt<bool>& v) { return v ? (*v ? "yes" : "NO") : ""; }
std::string cell(const Opt<Json>& v) {
  if (!v || v->is_null()) return "";
  return v->is_boolean() ? (v->get<bool>() ? "yes" : "NO") : text(*v);
}
std::string seconds_cell(const Opt<double>& v) { return v && std::isfinite(*v) ? num(*v, 3) + " s" : ""; }

struct Row {
  bool bad = false;                // drawn as a failure
  std::vector<std::string> cells;  // HTML
};

// A table of the given columns, or "none".
std::string table(const std::vector<Row>& rows, const std::vector<const char*>& columns, const char* cls = "") {
  if (rows.empty()) return "<p class=\"none\">none</p>";
  std::ostringstream o;
  o << "<table class=\"" << cls << "\"><tr>";
  for (const auto* c : columns) o << "<th>" << c << "</th>";
  o << "</tr>";
  for (const auto& r : rows) {
    o << "<tr" << (r.bad ? " class=\"bad\"" : "") << ">";
    for (const auto& c : r.cells) o << "<td>" << c << "</td>";
    o << "</tr>";
  }
  return o.str() + "</table>";
}

std::string checks_table(const std::vector<Check>& checks) {
  std::vector<Row> rows;
  rows.reserve(checks.size());
  for (const auto& c : checks) rows.push_back({c.ok == false, {cell(c.name), cell(c.ok), cell(c.detail)}});
  return table(rows, {"check", "ok", "detail"});
}

// report.md's markdown (its tables, bullets and text) as HTML, escaped.
std::string markdown_section(const std::string& md) {
  std::istringstream in(md);
  std::ostringstream o;
  std::string line;
  bool in_table = false, in_list = false;
  auto close = [&] {
    if (in_table) o << "</table>";
    if (in_list) o << "</ul>";
    in_table = in_list = false;
  };
  while (std::getline(in, line)) {
    if (line.rfind('|', 0) == 0) {
      if (line.rfind("|---", 0) == 0) continue;
      if (!in_table) close(), o << "<table>", in_table = true;
      o << "<tr>";
      std::size_t b = 1, e;
      while ((e = line.find(" |", b)) != std::string::npos) {
        std::string cell = line.substr(b, e - b);
        cell.erase(0, cell.find_first_not_of(' '));
        o << "<td>" << esc(cell) << "</td>";
        b = e + 2;
      }
      o << "</tr>";
    } else if (line.rfind("- ", 0) == 0) {
      if (!in_list) close(), o << "<ul>", in_list = true;
      o << "<li>" << esc(line.substr(2)) << "</li>";
    } else {
      close();
      if (line.rfind("## ", 0) == 0)
        o << "<h2>" << esc(line.substr(3)) << "</h2>";
      else if (!line.empty())
        o << "<p>" << esc(line) << "</p>";
    }
  }
  close();
  return o.str();
}

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1080px;margin:24px auto;padding:0 16px;color:#1d2433}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dce3;padding-bottom:4px}
.verdict{font-size:16px;padding:10px 14px;border-radius:6px;margin:12px 0}.passed{background:#e3f2e1}.failed,.interrupted{background:#fbe3e4}
table{border-collapse:collapse;margin:6px 0 12px}td,th{border:1px solid #d8dce3;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f8}tr.bad td{background:#fbe3e4}.none{color:#6b7385;font-style:italic}
figure{margin:10px 0}figcaption{font-weight:600;margin-bottom:4px}.row{display:flex;gap:12px;flex-wrap:wrap}.row figure{flex:1;min-width:320px}
svg.chart{width:100%;height:auto;background:#fbfcfd;border:1px solid #e6e9ee}
.grid{stroke:#e6e9ee}.axis{stroke:#8a93a5}.tick,.legend,.label{font-size:11px;fill:#4a5468}.marker{stroke:#b5651d;stroke-dasharray:3 3}
.marker-label{font-size:11px;fill:#b5651d}.on-bar{font-size:11px;fill:#fff}.meta{color:#4a5468}code{background:#f3f5f8;padding:1px 4px;border-radius:3px}
)";

}  // namespace

std::string report_html(const RunReport& report, const json& trace) {
  std::ostringstream o;
  const std::string status = report.status.value_or("");
  const char* what = report.reproduction ? "reproduce " : "pilot ";
  const std::string run_id = report.run_id ? esc(*report.run_id) : "n/a";
  const auto or_na = [](const Opt<std::string>& v) { return v ? esc(*v) : std::string("n/a"); };
  const auto int_text = [](const Opt<std::int64_t>& v) { return v ? std::to_string(*v) : std::string("n/a"); };
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
    // Nothing to fetch and nothing to run: the page is its own content.
    << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
       "img-src data:\">"
    << "<title>anchor " << what << run_id << "</title><style>" << kStyle << "</style></head><body>\n";
  o << "<h1>anchor " << what << run_id << "</h1>";
  o << "<p class=\"meta\">" << or_na(report.created_at) << " to " << or_na(report.finished_at) << " &middot; config "
    << or_na(report.config_path) << " &middot; device " << or_na(report.device) << " &middot; "
    << (report.is_signed == true ? "signed by key " + or_na(report.signer_key_id) + " (report.intoto.json)"
                                 : "<b>UNSIGNED</b>: " + or_na(report.unsigned_reason))
    << "</p>";
  o << "<div class=\"verdict " << esc(status) << "\" id=\"verdict\"><b>" << esc(status.empty() ? "unknown" : status)
    << "</b>: " << or_na(report.message) << "</div>";
  bool profiled = false;  // worker B's profile of a step (docs/report.md, "profile.json")
  for (const auto& st : or_empty(report.stages))
    profiled |= st.figures && st.figures->profile && st.figures->profile->file == "profile.json";
  o << "<p class=\"meta\">Beside this page: <code>report.json</code> (everything), <code>report.md</code>, "
       "<a href=\"trace.json\">trace.json</a> (the stages of every process, for ui.perfetto.dev or "
       "chrome://tracing), "
    << (profiled ? "<a href=\"profile.json\">profile.json</a> (the profile of one step, the same way), " : "")
    << "<code>events.jsonl</code>.</p>";

  std::vector<Row> stages;
  for (const auto& st : or_empty(report.stages))
    stages.push_back({false, {cell(st.stage), cell(st.status), seconds_cell(st.seconds), cell(st.error)}});
  o << "<h2>Stages</h2>" << table(stages, {"stage", "status", "seconds", "error"});
  o << timeline(trace);

  o << "<h2>Resume</h2>";
  if (const auto& resume = report.resume)
    o << "<p>Verdict: <b>" << or_na(resume->verdict) << "</b> (" << or_na(resume->mode) << "); saved at step "
      << int_text(resume->saved_step) << ", restored step " << int_text(resume->restored_step) << ".</p>"
      << checks_table(or_empty(resume->checks));
  else
    o << "<p class=\"none\">no resume comparison: the pilot stopped before it</p>";
  o << training_charts(report);

  if (const auto& repro = report.reproduction) {
    const Reproduces& of = or_empty(report.reproduces);
    std::vector<Row> drift;
    for (const auto& d : or_empty(of.drift))
      drift.push_back({false, {cell(d.what), cell(d.old_value), cell(d.new_value)}});
    o << "<h2>Reproduction</h2><p>Verdict: <b>" << or_na(repro->verdict) << "</b> (" << or_na(repro->mode) << ") of "
      << or_na(of.report) << ".</p>"
      << "<p>What drifted since the original run:</p>" << table(drift, {"what", "then", "now"})
      << "<p>The re-run against the original: " << int_text(repro->differences) << " difference(s), those first:</p>";
    // The differences first: hundreds of equal figures should not hide one that is not.
    std::vector<Check> checks;
    for (bool ok : {false, true})
      for (const auto& c : or_empty(repro->checks))
        if ((c.ok == true) == ok) checks.push_back(c);
    o << checks_table(checks);
  }

  o << "<h2>Memory</h2>" << memory_chart(report);
  std::ostringstream md;
  detail::measurements_md(md, report);
  detail::environment_md(md, report);
  o << markdown_section(md.str());
  o << "<p class=\"meta\">The whole plan, the memory model and the budget: report.md and <code>anchor plan</code>.</p>";
  o << "</body></html>\n";
  return o.str();
}

}  // namespace anchor::run_report
