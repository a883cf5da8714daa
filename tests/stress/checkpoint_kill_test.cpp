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
  std::uniform_int_distribution<int> delay_us(0, 20000);
  int killed_mid_write = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The child saves over and over, each file marked by its learning rate. It only does
      // file I/O (no OpenMP after fork).
      for (int i = 1;; ++i) {
        trainer.set_learning_rate(1000.0f + static_cast<float>(trial * 100000 + i));
        trainer.save_checkpoint(path);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    // Whatever the moment, the target loads and is one of the files saved whole.
    Trainer check(kModels + "mnist_mlp.onnx", o);
    ASSERT_NO_THROW(check.load_checkpoint(path)) << "trial " << trial;
    EXPECT_GE(check.learning_rate(), 1000.0f);
    int temporaries = 0;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().string() != path) ++temporaries;
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
