// The SpinGovernor's choices on the idle patterns of server/spin_governor.h: a lone client
// (short busy spells, short gaps), waves of calls (long busy spells), and a slow client (gaps
// longer than the spin), and its return to spinning when a pattern ends.
#include "server/spin_governor.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ringkv {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

constexpr microseconds kSpin{200};

// `spells` busy spells of `work` units each, in turns of one unit, each after `gap` of idle.
void Feed(SpinGovernor& governor, int spells, int work, microseconds gap) {
  for (int i = 0; i < spells; ++i) {
    governor.OnWork(1, gap);
    for (int j = 1; j < work; ++j) governor.OnWork(1, nanoseconds(0));
  }
}

TEST(SpinGovernorTest, ANewLoopSpinsUnlessTheSpinIsZero) {
  EXPECT_TRUE(SpinGovernor(kSpin).ShouldSpin());
  EXPECT_FALSE(SpinGovernor(nanoseconds(0)).ShouldSpin());
}

TEST(SpinGovernorTest, ALoneClientKeepsItSpinning) {
  SpinGovernor governor(kSpin);
  Feed(governor, 1000, 3, microseconds(20));
  EXPECT_TRUE(governor.ShouldSpin());
}

TEST(SpinGovernorTest, WavesOfCallsStopTheSpinAndALoneClientBringsItBack) {
  SpinGovernor governor(kSpin);
  Feed(governor, 20, 30, microseconds(30));
  EXPECT_FALSE(governor.ShouldSpin());
  // Spells of one unit more than the bound still share their wake-ups.
  Feed(governor, 100, SpinGovernor::kShortSpellWork + 1, microseconds(30));
  EXPECT_FALSE(governor.ShouldSpin());
  Feed(governor, 40, 3, microseconds(30));
  EXPECT_TRUE(governor.ShouldSpin());
}

TEST(SpinGovernorTest, SpellsOfTheBoundSpinAndOfOneMoreDoNotFromEitherSide) {
  constexpr int kBound = SpinGovernor::kShortSpellWork;
  for (const int before : {1, 30}) {
    SpinGovernor governor(kSpin);
    Feed(governor, 100, before, microseconds(30));
    Feed(governor, 200, kBound, microseconds(30));
    EXPECT_TRUE(governor.ShouldSpin()) << "after spells of " << before;
    Feed(governor, 200, before, microseconds(30));
    Feed(governor, 200, kBound + 1, microseconds(30));
    EXPECT_FALSE(governor.ShouldSpin()) << "after spells of " << before;
  }
}

TEST(SpinGovernorTest, ASpellIsItsTurnsTogether) {
  // Work in one turn or in many is the same spell: 30 turns of one unit, then idle.
  SpinGovernor governor(kSpin);
  for (int i = 0; i < 20; ++i) {
    governor.OnWork(30, microseconds(30));
  }
  SpinGovernor turns(kSpin);
  Feed(turns, 20, 30, microseconds(30));
  EXPECT_FALSE(governor.ShouldSpin());
  EXPECT_FALSE(turns.ShouldSpin());
}

TEST(SpinGovernorTest, GapsLongerThanTheSpinStopItAndShortOnesBringItBack) {
  SpinGovernor governor(kSpin);
  Feed(governor, 20, 2, microseconds(1000));
  EXPECT_FALSE(governor.ShouldSpin());
  Feed(governor, 20, 2, kSpin - microseconds(1));
  EXPECT_TRUE(governor.ShouldSpin());
  // A gap of exactly the spin ran it to its end.
  Feed(governor, 20, 2, kSpin);
  EXPECT_FALSE(governor.ShouldSpin());
}

TEST(SpinGovernorTest, OneLongSpellIsForgottenAfterAFewShortOnes) {
  // A loop that was loaded for a while (a million units without a pause) and then serves a
  // lone client again spins again within a few of its calls.
  SpinGovernor governor(kSpin);
  governor.OnWork(1'000'000, microseconds(20));
  Feed(governor, 1, 3, microseconds(20));
  EXPECT_FALSE(governor.ShouldSpin());
  Feed(governor, 30, 3, microseconds(20));
  EXPECT_TRUE(governor.ShouldSpin());
}

}  // namespace
}  // namespace ringkv
