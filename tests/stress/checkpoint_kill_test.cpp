// SIGKILL at random moments while a checkpoint is being written: the target path always holds
// a complete checkpoint (the previous one or the new one), never a torn file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "volt/volt.hpp"

namespace volt {
namespace {

namespace fs = std::filesystem;
const std::string kModels = std::string(VOLT_SOURCE_DIR) + "/models/";

int temporaries_beside(const fs::path& dir, const std::string& target) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().string() != target) ++n;
  return n;
}

TEST(CheckpointKill, KilledSavesNeverLeaveATornFile) {
  const fs::path dir = fs::temp_directory_path() / ("volt_kill_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "model.ckpt").string();
  // Adam's state makes the file larger: more moments to kill in.
  const TrainOptions o = {{"optimizer", "adam"}, {"threads", "1"}};
  Trainer trainer(kModels + "mnist_mlp.onnx", o);
  trainer.set_learning_rate(1000.0f);
  trainer.save_checkpoint(path);

  const char* env = std::getenv("VOLT_KILL_TRIALS");
  const int trials = env ? std::atoi(env) : 60;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> delay_us(0, 5000);
  int killed_mid_write = 0;
  for (int trial = 0; trial < trials; ++trial) {
    int started[2];
    ASSERT_EQ(pipe(started), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The child saves over and over, each file marked by its learning rate. It only does
      // file I/O (no OpenMP after fork). It says when it starts, so that the kill lands among
      // saves however loaded the machine is.
      const char go = 1;
      if (write(started[1], &go, 1) != 1) _exit(3);
      for (int i = 1;; ++i) {
        trainer.set_learning_rate(1000.0f + static_cast<float>(trial * 100000 + i));
        trainer.save_checkpoint(path);
      }
    }
    char go = 0;
    ASSERT_EQ(read(started[0], &go, 1), 1);
    close(started[0]);
    close(started[1]);
    // Half the kills at a random moment, half just after a temporary appears (a save in
    // progress), so both kinds of moment are covered on a fast or a loaded machine.
    if (trial % 2) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (std::chrono::steady_clock::now() < give_up && temporaries_beside(dir, path) == 0) {
      }
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng) / 20));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    }
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    // Whatever the moment, the target loads and is one of the files saved whole.
    Trainer check(kModels + "mnist_mlp.onnx", o);
    ASSERT_NO_THROW(check.load_checkpoint(path)) << "trial " << trial;
    EXPECT_GE(check.learning_rate(), 1000.0f);
    const int temporaries = temporaries_beside(dir, path);
    // The kill landed mid-write when it left a temporary; the next save removes it.
    killed_mid_write += temporaries > 0;
    EXPECT_LE(temporaries, 1);
  }
  std::printf("%d trials, %d kills landed while a temporary was being written\n", trials,
              killed_mid_write);
  EXPECT_GT(killed_mid_write, 0) << "no kill hit a save in progress: the test proved nothing";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace volt
