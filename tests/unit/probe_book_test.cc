// ProbeBook: which candidates a visit sees (aged evidence, oldest first, all
// of a tick's age after SuspectAll), what kDone, kLater and kBlocked leave
// in the book, its bound, and probes expiring in order at their window's end.
#include "policies/probe_book.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace kvtier {
namespace {

using Visited = ProbeBook::Visited;
using Seen = std::vector<std::pair<uint32_t, GroupId>>;

// Visits at `now` and says kDone to every candidate; returns what it saw.
Seen VisitAll(ProbeBook& book, uint32_t now, uint32_t active_ticks) {
  Seen seen;
  book.VisitAged(now, active_ticks, [&](uint32_t tick, GroupId g) {
    seen.emplace_back(tick, g);
    return Visited::kDone;
  });
  return seen;
}

TEST(ProbeBook, AVisitSeesCandidatesOnceTheirEvidenceHasAged) {
  ProbeBook book;
  book.Note(10, 1);
  book.Note(12, 2);
  book.Note(15, 3);
  EXPECT_TRUE(VisitAll(book, 14, 5).empty()) << "the oldest is 4 ticks old";
  EXPECT_EQ(VisitAll(book, 17, 5), (Seen{{10, 1}, {12, 2}}));
  EXPECT_EQ(book.candidates(), 1u);
  EXPECT_EQ(VisitAll(book, 20, 5), (Seen{{15, 3}}));
  EXPECT_EQ(book.candidates(), 0u);
}

TEST(ProbeBook, SuspectAllMakesTheNextVisitTakeEvidenceATickOld) {
  ProbeBook book;
  book.Note(10, 1);
  book.Note(19, 2);
  book.Note(20, 3);
  book.SuspectAll();
  EXPECT_TRUE(book.suspect_all());
  EXPECT_EQ(VisitAll(book, 20, 100), (Seen{{10, 1}, {19, 2}})) << "not this tick's evidence";
  EXPECT_FALSE(book.suspect_all()) << "one visit only";
  EXPECT_TRUE(VisitAll(book, 21, 100).empty()) << "back to active_ticks";
}

TEST(ProbeBook, LaterKeepsTheCandidateAndThoseAfterIt) {
  ProbeBook book;
  for (GroupId g = 1; g <= 3; ++g) book.Note(g, g);
  Seen seen;
  book.VisitAged(100, 5, [&](uint32_t tick, GroupId g) {
    seen.emplace_back(tick, g);
    return g == 2 ? Visited::kLater : Visited::kDone;
  });
  EXPECT_EQ(seen, (Seen{{1, 1}, {2, 2}}));
  EXPECT_EQ(VisitAll(book, 100, 5), (Seen{{2, 2}, {3, 3}})) << "2 is visited again, first";
}

TEST(ProbeBook, TheBoundDropsTheOldestUnlessAVisitWasBlocked) {
  ProbeBook book(2);
  for (GroupId g = 1; g <= 3; ++g) book.Note(100, g);  // none aged yet
  // A visit with nothing aged still trims the book to its bound.
  EXPECT_TRUE(VisitAll(book, 101, 5).empty());
  EXPECT_EQ(book.candidates(), 2u);
  book.Note(100, 4);
  // Blocked at the first: the visit ends at once and trims nothing.
  int calls = 0;
  book.VisitAged(200, 5, [&](uint32_t, GroupId) {
    ++calls;
    return Visited::kBlocked;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(book.candidates(), 3u);
  EXPECT_EQ(VisitAll(book, 200, 5), (Seen{{100, 2}, {100, 3}, {100, 4}}));
}

TEST(ProbeBook, ProbesExpireInOrderWhenTheirWindowEnds) {
  ProbeBook book;
  book.Start(20, 7);
  book.Start(22, 8);
  book.Start(22, 9);
  std::vector<GroupId> idle;
  book.Expire(19, [&](GroupId g) { idle.push_back(g); });
  EXPECT_TRUE(idle.empty());
  book.Expire(20, [&](GroupId g) { idle.push_back(g); });
  EXPECT_EQ(idle, (std::vector<GroupId>{7}));
  book.Expire(30, [&](GroupId g) { idle.push_back(g); });
  EXPECT_EQ(idle, (std::vector<GroupId>{7, 8, 9}));
  EXPECT_EQ(book.probes_out(), 0u);
}

}  // namespace
}  // namespace kvtier
