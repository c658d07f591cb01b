// A test fixture holding the model the repository ships and its tokenizer, loaded once per suite.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "core/thread_pool.h"
#include "model/model.h"
#include "rkv/tokenizer.h"
#include "test_util.h"

namespace rkv::test {

class ShippedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(shipped_model_dir());
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(shipped_model_dir()));
  }
  static void TearDownTestSuite() {
    model_.reset();
    tokenizer_.reset();
  }
  static inline std::unique_ptr<Model> model_;
  static inline std::unique_ptr<Tokenizer> tokenizer_;
  ThreadPool pool_{2};
};

}  // namespace rkv::test
