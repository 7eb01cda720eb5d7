// ProgressBar: see progress.h.
#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace pg::cli {

std::string format_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = int64_t(std::llround(s));
  if (t >= 3600) return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

ProgressBar::ProgressBar(std::string label, std::string unit, int64_t total_items, uint64_t total_bytes)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_items_(total_items),
      total_bytes_(total_bytes),
      start_(Clock::now()),
      last_draw_(start_),
      tty_(::isatty(STDERR_FILENO) == 1) {}

void ProgressBar::update(int64_t items_done, uint64_t bytes_done) {
  items_ = items_done;
  bytes_ = bytes_done;
  const auto now = Clock::now();
  if (tty_) {
    if (now - last_draw_ >= std::chrono::milliseconds(100)) draw(false);
    return;
  }
  const double f = total_bytes_ > 0 ? double(bytes_) / double(total_bytes_) : 1.0;
  const int decile = int(std::floor(10.0 * f));
  if (decile > last_decile_ && decile < 10) {
    last_decile_ = decile;
    draw(false);
  }
}

void ProgressBar::note(const std::string& line) {
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s\n", line.c_str());
    draw(false);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

void ProgressBar::draw(bool final) {
  constexpr int kWidth = 30;  // characters of the bar itself
  const auto now = Clock::now();
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  // Progress by bytes: tensors differ in size by orders of magnitude, bytes track the time spent.
  const double f = total_bytes_ > 0 ? std::min(1.0, double(bytes_) / double(total_bytes_)) : 1.0;
  const int filled = int(f * kWidth);
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '.');
  // The rate of the first instants is noise (page cache, tiny first tensors): shown after 1 s.
  const std::string rate = elapsed >= 1.0 ? format_bytes(double(bytes_) / elapsed) + "/s" : std::string("-");
  const std::string eta = final ? "done in " + format_duration(elapsed)
                                : "ETA " + (f > 0 ? format_duration(elapsed * (1.0 - f) / f) : std::string("?"));
  const std::string line = fmt::format("{}: [{}] {:3.0f}% {}/{} {} | {} / {} | {} | {}", label_, bar, 100.0 * f,
                                       items_, total_items_, unit_, format_bytes(double(bytes_)),
                                       format_bytes(double(total_bytes_)), rate, eta);
  if (tty_)
    std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace pg::cli
