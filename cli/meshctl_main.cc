// meshctl: the meshcast command-line client. All logic lives in
// cli/meshctl.cc; main only forwards arguments and prints the result.
#include <iostream>
#include <string>
#include <vector>

#include "cli/meshctl.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const meshcast::cli::CommandResult result = meshcast::cli::RunMeshctl(args);
  std::cout << result.out << std::flush;
  std::cerr << result.err << std::flush;
  return result.exit_code;
}
