//! The test programs are built and runnable.

#[test]
fn hello_threads_runs() {
    let out = std::process::Command::new(strobe_testprogs::path("hello_threads"))
        .arg("2")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from 2 threads\n");
}
