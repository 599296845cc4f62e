// moetrace: profile and analyze Mixture-of-Experts training traces.
#include <cstdio>
#include <exception>
#include <string_view>

#include "commands.h"
#include "fatal_signals.h"
#include "moetrace/analyzer/heap.h"
#include "moetrace/schema/error.h"

int main(int argc, char** argv) {
  // Not for `run`: its CUDA backend hosts the driver's and CUPTI's threads,
  // whose allocations under one arena (heap.h) were never measured, and the
  // collector's overhead is measured through it.
  if (argc < 2 || std::string_view(argv[1]) != "run") {
    moetrace::analyzer::heap_on_huge_pages();
    moetrace::analyzer::huge_pages_for_new_blocks();
  }
  moetrace::cli::report_truncated_files();
  CLI::App app{"moetrace: profile and analyze Mixture-of-Experts (MoE) training traces"};
  app.set_version_flag("--version", std::string("moetrace ") + MOETRACE_VERSION);
  app.require_subcommand(1);
  moetrace::cli::add_info_command(app);
  moetrace::cli::add_report_command(app);
  moetrace::cli::add_synth_command(app);
  moetrace::cli::add_run_command(app);
  moetrace::cli::add_fit_command(app);
  moetrace::cli::add_diff_command(app);
  moetrace::cli::add_replay_command(app);
  moetrace::cli::add_import_command(app);
  moetrace::cli::add_export_command(app);
  moetrace::cli::add_recommend_command(app);
  moetrace::cli::add_merge_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const moetrace::cli::ExitStatus& e) {
    return e.code;
  } catch (const moetrace::ConfigError& e) {
    std::fprintf(stderr, "moetrace: invalid configuration: %s\n", e.what());
    return 2;
  } catch (const moetrace::Error& e) {
    std::fprintf(stderr, "moetrace: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moetrace: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
