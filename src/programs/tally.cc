// tally: the command-line tool for a running tallyd.
//
//   tally verify --source 'postgresql://…' [--server 127.0.0.1:6380] [--user u] [--password p]
//                [--repair] [--timeout 60] [--progress] [counter ...]
//
// compares derived counters with their definitions' SELECT run on the PostgreSQL source,
// exactly, at one source position (programs/verify/verify.h says how). Exit status: 0 all
// equal (or repaired), 1 differences found and not repaired, 2 error, 3 no differences but
// some counters not compared.
//
//   tally cluster status|remove-node|rebalance [--server 127.0.0.1:6380] [--user u]
//                [--password p] [--timeout 600] [--nodes N (rebalance)]
//
// shows a cluster as one node sees it, drains a node before it is stopped, or waits until
// the partitions are spread evenly (programs/cluster_tool.h). Exit status: 0 done, 1 not
// done in time, 2 error.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "core/version.h"
#include "programs/cluster_tool.h"
#include "programs/verify/hold.h"
#include "programs/verify/verify.h"

int main(int argc, char** argv) {
  namespace verify = tally::verify;
  CLI::App app{"tally: tools for a running tallyd"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tally " + std::string(tally::Version()));
  verify::VerifyOptions options;
  CLI::App* command = app.add_subcommand(
      "verify",
      "Compares derived counters with their definitions' SELECT run on the PostgreSQL source, "
      "exactly, at one source position (tallyd holds there meanwhile). Exit 0 equal (or "
      "repaired), 1 differences, 2 error, 3 no differences but some counters not compared "
      "(pending or being backfilled).");
  command
      ->add_option("--source", options.source,
                   "libpq connection string of the source: postgresql://user:pw@host:port/db "
                   "or key=value; the role needs REPLICATION")
      ->required();
  command->add_option("--server", options.server, "tallyd's Redis address host:port")
      ->capture_default_str();
  command->add_option("--user", options.tallyd.user,
                      "a user of tallyd's ACL to sign in as (default: the default user)");
  command->add_option("--password", options.tallyd.password,
                      "the user's password (the default user's is tallyd's --requirepass)");
  command->add_flag("--repair", options.repair,
                    "set every differing group to the source's value (atomically per batch of "
                    "1000 groups), then check again");
  command
      ->add_option("--timeout", options.timeout,
                   "seconds to wait for the slot's creation and for tallyd to reach its "
                   "consistent point")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  command->add_flag("--progress", options.progress,
                    "show progress on stderr even when it is not a terminal");
  command->add_option("counter", options.counters, "counters to verify (default: all)");

  tally::programs::ClusterToolOptions cluster;
  int64_t cluster_timeout = cluster.timeout.count();
  CLI::App* cluster_command =
      app.add_subcommand("cluster", "A cluster's nodes and partitions, and moving them");
  cluster_command->require_subcommand(1);
  const auto add_connection = [&](CLI::App* sub) {
    sub->add_option("--server", cluster.server, "a node's Redis address host:port")
        ->capture_default_str();
    sub->add_option("--user", cluster.tallyd.user, "a user of tallyd's ACL to sign in as");
    sub->add_option("--password", cluster.tallyd.password, "the user's password");
  };
  CLI::App* show = cluster_command->add_subcommand(
      "status",
      "The nodes (live, draining, partitions owned) and partitions as --server sees them");
  add_connection(show);
  CLI::App* remove_node = cluster_command->add_subcommand(
      "remove-node",
      "Drains the node at --server (CLUSTER.DRAIN): waits, showing each hand-over, until it "
      "owns nothing and every partition has a live owner elsewhere; then stop it");
  CLI::App* rebalance = cluster_command->add_subcommand(
      "rebalance",
      "Waits, showing each hand-over, until the partitions are spread evenly over the live nodes "
      "that are not draining (after adding a node, say)");
  rebalance
      ->add_option("--nodes", cluster.nodes,
                   "wait for this many live nodes that are not draining (default: those seen)")
      ->check(CLI::PositiveNumber);
  for (CLI::App* sub : {remove_node, rebalance}) {
    add_connection(sub);
    sub->add_option("--timeout", cluster_timeout, "seconds to wait at most")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
  }
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGPIPE, SIG_IGN);
  if (cluster_command->parsed()) {
    cluster.timeout = std::chrono::seconds(cluster_timeout);
    if (show->parsed()) return tally::programs::ClusterStatus(cluster, stdout);
    if (remove_node->parsed()) return tally::programs::ClusterRemoveNode(cluster, stdout);
    return tally::programs::ClusterRebalance(cluster, stdout);
  }

  // Never destroyed: the signal thread may use it until the process is gone.
  auto& hold = *new verify::Hold(options.server, options.tallyd);
  hold.ReleaseOnSignals();

  auto status = verify::Verify(options, hold);
  if (!status) {
    std::fflush(stdout);
    fmt::print(stderr, "tally verify: {}\n", status.error().message);
    return verify::kExitError;
  }
  return *status;
}
