# Sourced by the device calls on a fresh machine: llama.cpp 0.3.36's vendored source built with CUDA
# for sm_90 (libraries only, no FlashAttention kernels: 140-168 s on 16 cores), then env.sh.
mkdir -p /tmp/src && tar xzf .gpu/llama.tar.gz -C /tmp/src || exit 1
t0=$(date +%s)
cmake -S /tmp/src/llama.cpp -B .gpu/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF > $OUT/cmake.log 2>&1 || { tail -30 $OUT/cmake.log; exit 1; }
cmake --build .gpu/build -j 16 --target llama mtmd > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
. .gpu/env.sh || exit 1
