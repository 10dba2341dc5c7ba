// An expected-error-re whose regex does not match the message (no layout has sizePerThread = [8]).
#one = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [2], order = [0]}>
#four = #ttg.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [2], order = [0]}>
module attributes {"ttg.target" = "cuda:100", "ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 2 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @no_match() -> (tensor<256xf32, #one>, tensor<256xf32, #four>) {
    // expected-error-re @+1 {{{{.*}}sizePerThread = [8]{{.*}}}}
    %zero = arith.constant dense<0.0> : tensor<256xf32, #gluon.auto_encoding>
    %a = gluon.set_auto_layout %zero : tensor<256xf32, #gluon.auto_encoding> -> tensor<256xf32, #one>
    %b = gluon.set_auto_layout %zero : tensor<256xf32, #gluon.auto_encoding> -> tensor<256xf32, #four>
    tt.return %a, %b : tensor<256xf32, #one>, tensor<256xf32, #four>
  }
}
