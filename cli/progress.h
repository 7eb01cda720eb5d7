// A one-line progress bar on stderr for long commands (`peregrine quantize`): items done / total,
// bytes done / total, throughput and ETA. Redrawn in place on a terminal; elsewhere (logs, tests)
// one line per 10 % so that the log stays short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pg::cli {

class ProgressBar {
 public:
  // `unit` names the items ("tensors"); totals of 0 are allowed (an empty job).
  ProgressBar(std::string label, std::string unit, int64_t total_items, uint64_t total_bytes);
  // Redraws when the last draw is >= 100 ms old (terminal) or a 10 % step was crossed (not one).
  void update(int64_t items_done, uint64_t bytes_done);
  // A line of its own above the bar (a long step starting), then the bar again on a terminal.
  void note(const std::string& line);
  // Draws the final state and ends the line.
  void finish();

 private:
  void draw(bool final);

  using Clock = std::chrono::steady_clock;
  std::string label_, unit_;
  int64_t total_items_ = 0, items_ = 0;
  uint64_t total_bytes_ = 0, bytes_ = 0;
  Clock::time_point start_, last_draw_;
  int last_decile_ = -1;
  bool tty_ = false, finished_ = false;
};

// "1.23 GiB", "512 B".
std::string format_bytes(double bytes);
// "1:02:03", "4:05"; "?" for a negative or non-finite time.
std::string format_duration(double seconds);

}  // namespace pg::cli
