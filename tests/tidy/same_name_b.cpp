// A fixture of tests/tidy/test_tidy.sh: same_name_a.cpp and same_name_b.cpp each
// define helper() in an anonymous namespace, so the two do not compile as one
// translation unit; scripts/tidy.sh must check them apart, not fail. Not
// compiled into anything.
namespace {
int helper(int x) { return x + 1; }
}  // namespace

int use_b(int x) { return helper(x); }
