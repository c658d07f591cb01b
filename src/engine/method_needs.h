// TEMPORARY: what the engine asks of a method, until the method registry answers it.
#pragma once

#include "rkv/compression.h"

namespace rkv {

struct EngineMethodNeeds {
  bool compresses = false;
  bool step_attention = false;
  bool final_hidden = false;
  bool token_text = false;
  bool reads_entry_state = false;
  float initial_entry_state = 0.0f;
};

inline EngineMethodNeeds engine_needs(Method m) {
  EngineMethodNeeds n;
  n.compresses = m != Method::fullkv;
  n.step_attention = m == Method::h2o;
  n.final_hidden = m == Method::skipkv;
  n.token_text = m == Method::skipkv;
  n.reads_entry_state = m == Method::gkv || m == Method::h2o;
  n.initial_entry_state = m == Method::gkv ? kNoState : 0.0f;
  return n;
}

}  // namespace rkv
