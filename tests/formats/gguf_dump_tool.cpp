// Support tool for the one-off cross-check against the Python `gguf` package
// (tests/formats/gguf_crosscheck.py; result in docs/FORMATS.md), not a test:
//   gguf_dump_tool MODEL.gguf OUTDIR
// writes OUTDIR/<tensor>.f32: every tensor dequantized by GgufFile::read_tensor
// (file order, raw FP32), and OUTDIR/<tensor>.canonical.f32 for the Q and K
// weights as load_gguf_model returns them (rows un-permuted).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "formats/gguf.h"

using namespace futr;

static void dump(const std::filesystem::path& p, const Tensor& t) {
  std::ofstream o(p, std::ios::binary);
  o.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size() * 4));
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf OUTDIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[2];
  std::filesystem::create_directories(out);
  const GgufFile f(argv[1]);
  for (const GgufTensorInfo& t : f.tensors()) dump(out / (t.name + ".f32"), f.read_tensor(t));
  if (!f.find("llama.block_count")) {  // a tensor collection, not a model
    std::printf("%zu tensors dumped to %s\n", f.tensors().size(), out.c_str());
    return 0;
  }
  const Model m = load_gguf_model(f, true);
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    dump(out / ("blk." + std::to_string(l) + ".attn_q.weight.canonical.f32"), m.weights.layers[l].wq);
    dump(out / ("blk." + std::to_string(l) + ".attn_k.weight.canonical.f32"), m.weights.layers[l].wk);
  }
  std::printf("%zu tensors dumped to %s\n", f.tensors().size(), out.c_str());
  return 0;
}
