// The smallest model shape the synth and publisher tests write: two layers and a thousand-word
// vocabulary, about a megabyte in bf16, yet every tensor kind of a real transformer.
#pragma once

#include <cstdint>

#include "synth/model_shape.h"

namespace weightcast::synth::testing {

inline ModelShape TinyShape(uint64_t layers = 2) {
  ModelShape s;
  s.hidden = 128;
  s.intermediate = 384;
  s.layers = layers;
  s.heads = 2;
  s.kv_heads = 1;
  s.vocab = 1000;
  return s;
}

}  // namespace weightcast::synth::testing
