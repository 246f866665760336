// The interactive kvtier-top screen (see curses_view.h).
#include "tools/top/curses_view.h"

#include <curses.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tools/top/layout.h"

namespace kvtier::top {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

enum Pair : short {
  kPairDevice = 1,
  kPairHost,
  kPairDisk,
  kPairColumnHeader,
  kPairSortColumn,
  kPairSelected,
  kPairError,
  kPairWarn,
  kPairLabel,
};

class View {
 public:
  View(Collector& collector, const CursesOptions& options, bool color)
      : collector_(collector), options_(options), color_(color) {
    if (options.detail_pid > 0) {
      selected_pid_ = options.detail_pid;
      detail_ = true;
    }
  }

  int Run();

 private:
  attr_t Attr(Style style) const;
  void Paint(int y, const Line& line, bool selected) const;
  void Draw();
  void DrawList(int y, int height, const ViewOptions& vo);
  void DrawDetail(int y, int height, const ViewOptions& vo);
  void Footer(const std::string& keys);
  // False when the key asks to quit.
  bool HandleKey(int ch);
  // Scrolls the detail view, or moves the selection in the list.
  void Move(int delta);
  void MoveSelection(int delta);

  Collector& collector_;
  const CursesOptions options_;
  const bool color_;  // the terminal has colours; else attributes and tier letters
  Model model_;
  SortKey sort_ = SortKey::kPid;
  int32_t selected_pid_ = 0;  // follows the process across re-sorts
  int list_scroll_ = 0;
  int page_ = 10;  // rows per page, from the last draw
  bool detail_ = false;
  int detail_scroll_ = 0;
  std::string status_;  // one-off message in the footer
};

attr_t View::Attr(Style style) const {
  if (!color_) {
    switch (style) {
      case Style::kTitle:
      case Style::kLabel:
      case Style::kDevice:
        return A_BOLD;
      case Style::kColumnHeader:
        return A_REVERSE;
      case Style::kSortColumn:
        return A_REVERSE | A_BOLD | A_UNDERLINE;
      case Style::kSelected:
        return A_REVERSE | A_BOLD;
      case Style::kError:
      case Style::kWarn:
        return A_BOLD;
      case Style::kDisk:
        return A_UNDERLINE;
      case Style::kUntouched:
      case Style::kDim:
        return A_DIM;
      default:
        return A_NORMAL;
    }
  }
  switch (style) {
    case Style::kTitle:
      return A_BOLD;
    case Style::kLabel:
      return COLOR_PAIR(kPairLabel) | A_BOLD;
    case Style::kColumnHeader:
      return COLOR_PAIR(kPairColumnHeader);
    case Style::kSortColumn:
      return COLOR_PAIR(kPairSortColumn) | A_BOLD;
    case Style::kDevice:
      return COLOR_PAIR(kPairDevice) | A_BOLD;
    case Style::kHost:
      return COLOR_PAIR(kPairHost) | A_BOLD;
    case Style::kDisk:
      return COLOR_PAIR(kPairDisk) | A_BOLD;
    case Style::kUntouched:
    case Style::kDim:
      return A_DIM;
    case Style::kWarn:
      return COLOR_PAIR(kPairWarn) | A_BOLD;
    case Style::kError:
      return COLOR_PAIR(kPairError) | A_BOLD;
    case Style::kSelected:
      return COLOR_PAIR(kPairSelected);
    default:
      return A_NORMAL;
  }
}

void View::Paint(int y, const Line& line, bool selected) const {
  if (y < 0 || y >= LINES) return;
  const int width = COLS;
  int x = 0;
  move(y, 0);
  for (const Span& span : line.spans) {
    if (x >= width) break;
    attrset(selected ? Attr(Style::kSelected) : Attr(span.style));
    const int n = std::min(static_cast<int>(span.text.size()), width - x);
    addnstr(span.text.data(), n);
    x += n;
  }
  const Style fill = selected ? Style::kSelected : line.fill;
  attrset(Attr(fill));
  if (fill == Style::kNormal) {
    clrtoeol();
  } else {
    // The bottom-right cell would scroll the screen; leave it.
    const int end = y == LINES - 1 ? width - 1 : width;
    for (; x < end; ++x) addch(' ');
  }
  attrset(A_NORMAL);
}

void View::Footer(const std::string& keys) {
  Line footer;
  footer.fill = Style::kColumnHeader;
  footer.Add(status_.empty() ? keys : status_ + "   " + keys, Style::kColumnHeader);
  Paint(LINES - 1, footer, false);
}

void View::Draw() {
  erase();
  ViewOptions vo;
  vo.width = COLS;
  vo.sort = sort_;
  vo.delay_s = options_.delay_s;
  vo.tier_letters = !color_;
  if (detail_) {
    DrawDetail(0, LINES - 1, vo);
  } else {
    DrawList(0, LINES - 1, vo);
  }
  refresh();
}

void View::DrawList(int y, int height, const ViewOptions& vo) {
  for (const Line& line : HeaderLines(model_, vo)) {
    if (y < height - 1) Paint(y++, line, false);
  }
  Paint(y++, TableHeader(vo, ModelWords(model_)), false);
  const std::vector<const Process*> sorted = SortedProcesses(model_, sort_);
  page_ = std::max(1, height - y);
  if (sorted.empty()) {
    Paint(y, Line().Add("  no kvtier process publishes statistics in " + model_.dir), false);
    Footer("q quit");
    return;
  }
  int index = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i]->seg->pid == selected_pid_) index = static_cast<int>(i);
  }
  selected_pid_ = sorted[index]->seg->pid;
  if (index < list_scroll_) list_scroll_ = index;
  if (index >= list_scroll_ + page_) list_scroll_ = index - page_ + 1;
  list_scroll_ = std::clamp(list_scroll_, 0, std::max(0, static_cast<int>(sorted.size()) - page_));
  for (int row = 0; row < page_ && list_scroll_ + row < static_cast<int>(sorted.size()); ++row) {
    const Process* p = sorted[list_scroll_ + row];
    Paint(y + row, ProcessRow(*p, vo), p->seg->pid == selected_pid_);
  }
  Footer("Up/Down select  Enter details  s sort  q quit");
}

void View::DrawDetail(int y, int height, const ViewOptions& vo) {
  const Process* process = nullptr;
  for (const Process& p : model_.processes) {
    if (p.seg->pid == selected_pid_) process = &p;
  }
  if (process == nullptr) {  // it exited: back to the list
    status_ = "process " + std::to_string(selected_pid_) + " is gone";
    detail_ = false;
    DrawList(y, height, vo);
    return;
  }
  Paint(y++, HeaderLines(model_, vo).front(), false);
  const std::vector<Line> lines = DetailLines(*process, model_, vo);
  const int visible = std::max(1, height - y);
  page_ = visible;
  detail_scroll_ =
      std::clamp(detail_scroll_, 0, std::max(0, static_cast<int>(lines.size()) - visible));
  for (int i = 0; i < visible && detail_scroll_ + i < static_cast<int>(lines.size()); ++i) {
    Paint(y + i, lines[detail_scroll_ + i], false);
  }
  char where[64];
  snprintf(where, sizeof where, "   lines %d-%d of %zu", detail_scroll_ + 1,
           std::min(detail_scroll_ + visible, static_cast<int>(lines.size())), lines.size());
  Footer(std::string("Up/Down scroll  Enter back  s sort  q quit") + where);
}

void View::Move(int delta) {
  if (detail_) {
    detail_scroll_ += delta;  // clamped to the content when drawn
  } else {
    MoveSelection(delta);
  }
}

void View::MoveSelection(int delta) {
  const std::vector<const Process*> sorted = SortedProcesses(model_, sort_);
  if (sorted.empty()) return;
  int index = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i]->seg->pid == selected_pid_) index = static_cast<int>(i);
  }
  index = std::clamp(index + delta, 0, static_cast<int>(sorted.size()) - 1);
  selected_pid_ = sorted[index]->seg->pid;
}

bool View::HandleKey(int ch) {
  constexpr int kFar = 1 << 20;  // Home/End: as far as it goes (clamped when drawn)
  status_.clear();
  switch (ch) {
    case 'q':
    case 'Q':
      return false;
    case KEY_UP:
    case 'k':
      Move(-1);
      break;
    case KEY_DOWN:
    case 'j':
      Move(1);
      break;
    case KEY_PPAGE:
      Move(-page_);
      break;
    case KEY_NPAGE:
    case ' ':
      Move(page_);
      break;
    case KEY_HOME:
      Move(-kFar);
      break;
    case KEY_END:
      Move(kFar);
      break;
    case '\n':
    case '\r':
    case KEY_ENTER:
      if (detail_) {
        detail_ = false;
      } else if (!model_.processes.empty()) {
        detail_ = true;
        detail_scroll_ = 0;
      }
      break;
    case 27:  // Esc
    case KEY_LEFT:
    case KEY_BACKSPACE:
    case 127:
      detail_ = false;
      break;
    case 's':
      sort_ = NextSortKey(sort_);
      break;
    default:  // KEY_RESIZE and the rest: just redraw
      break;
  }
  return true;
}

int View::Run() {
  const auto tick = std::chrono::milliseconds(static_cast<int64_t>(options_.delay_s * 1000));
  model_ = collector_.Collect();
  int iterations = 1;
  auto next = Clock::now() + tick;
  while (!g_stop) {
    Draw();
    if (options_.iterations > 0 && iterations >= options_.iterations) break;
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    timeout(static_cast<int>(std::max<int64_t>(0, wait.count())));
    const int ch = getch();
    if (ch != ERR) {
      if (!HandleKey(ch)) break;
      continue;
    }
    if (Clock::now() >= next) {
      model_ = collector_.Collect();
      ++iterations;
      next = Clock::now() + tick;
    }
  }
  return 0;
}

}  // namespace

int RunCurses(Collector& collector, const CursesOptions& options, std::string* error) {
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
    *error = "the interactive view needs a terminal; use --once or --json for a snapshot";
    return 1;
  }
  SCREEN* screen = newterm(nullptr, stdout, stdin);
  if (screen == nullptr) {
    const char* term = getenv("TERM");
    *error = std::string("cannot start the terminal (TERM=") + (term ? term : "unset") +
             "); use --once or --json for a snapshot";
    return 1;
  }
  set_term(screen);
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  curs_set(0);
  set_escdelay(25);
  bool color = false;
  if (has_colors()) {
    start_color();
    use_default_colors();
    init_pair(kPairDevice, COLOR_GREEN, -1);
    init_pair(kPairHost, COLOR_CYAN, -1);
    init_pair(kPairDisk, COLOR_MAGENTA, -1);
    init_pair(kPairColumnHeader, COLOR_BLACK, COLOR_GREEN);
    init_pair(kPairSortColumn, COLOR_BLACK, COLOR_CYAN);
    init_pair(kPairSelected, COLOR_BLACK, COLOR_CYAN);
    init_pair(kPairError, COLOR_RED, -1);
    init_pair(kPairWarn, COLOR_YELLOW, -1);
    init_pair(kPairLabel, COLOR_CYAN, -1);
    color = true;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;  // no SA_RESTART: getch returns and the loop ends
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  View view(collector, options, color);
  const int code = view.Run();
  endwin();
  delscreen(screen);
  return code;
}

}  // namespace kvtier::top
