module {
  tt.func @f() {
    "test.op"() : () -> ()
    tt.return
  }
}
