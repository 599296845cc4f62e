// The command line of a benchmark program, read flag by flag:
//
//   for (bench::Args args("paper_bench", argc, argv); args.next();)
//     if (args.flag() == "--paper") paper = args.value();
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace moetrace::bench {

class Args {
 public:
  Args(const char* program, int argc, char** argv) : program_(program), argc_(argc), argv_(argv) {}

  // Moves to the next argument; false after the last.
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
  }
  const std::string& flag() const { return flag_; }
  // The argument after the flag; where there is none, says so on stderr
  // ("PROGRAM: FLAG needs a value") and exits with status 2.
  std::string value() {
    if (i_ + 1 >= argc_) {
      std::fprintf(stderr, "%s: %s needs a value\n", program_, flag_.c_str());
      std::exit(2);
    }
    return argv_[++i_];
  }

 private:
  const char* program_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

}  // namespace moetrace::bench
