//! `examples/09_train_unet/` on the CPU: its `--tiny` run (the resnet18 U-Net trained on
//! 32 x 32 crops of the sample store with host batches) must give finite losses that fall,
//! and bad settings must fail with errors that say what to change. The example's own code is
//! compiled in here, so this test needs no built example binary.

#[allow(dead_code)]
#[path = "../examples/09_train_unet/main.rs"]
mod train_unet;

use clap::Parser;
use train_unet::{check_loss_falls, run, Args};

fn args(flags: &[&str]) -> Args {
    Args::parse_from(std::iter::once("09_train_unet").chain(flags.iter().copied()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_training_loss_is_finite_and_falls() {
    let report = run(args(&["--tiny"])).await.expect("the tiny run");
    assert_eq!(report.loader, "host");
    assert_eq!(report.device, "cpu");
    assert_eq!(report.input_shape, vec![4, 32, 32]);
    assert_eq!(
        report.losses.len(),
        report.warmup_steps + report.timed_steps
    );
    check_loss_falls(&report.losses).expect("the loss falls");
    assert!(report.samples_per_second > 0.0);
    assert!((0.0..=1.0).contains(&report.data_wait_fraction));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_alone_delivers_the_steps_without_losses() {
    let report = run(args(&["--tiny", "--no-training", "--steps", "60"]))
        .await
        .expect("loading alone");
    assert!(!report.training);
    assert!(report.losses.is_empty());
    assert_eq!(report.timed_steps, 60); // more than one epoch (56 batches of 4): epochs roll over
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grid_the_unet_cannot_halve_five_times_is_refused() {
    let error = run(args(&["--tiny", "--patch", "48"])).await.unwrap_err();
    let message = format!("{error:#}");
    assert!(message.contains("divide by 32"), "{message}");
    assert!(message.contains("latitude is 48"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_variable_is_named() {
    let error = run(args(&["--tiny", "--vars", "t2m,V500"]))
        .await
        .unwrap_err();
    let message = format!("{error:#}");
    assert!(message.contains("V500"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_without_a_variable_are_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    std::fs::write(
        &stats,
        r#"[{"variable": "t2m", "mean": 280.0, "std": 20.0}]"#,
    )
    .unwrap();
    let flags = [
        "--tiny",
        "--vars",
        "t2m,u10",
        "--normalize",
        stats.to_str().unwrap(),
    ];
    let error = run(args(&flags)).await.unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("no statistics for variable `u10`"),
        "{message}"
    );

    let missing = dir.path().join("absent.json");
    let flags = ["--tiny", "--normalize", missing.to_str().unwrap()];
    let message = format!("{:#}", run(args(&flags)).await.unwrap_err());
    assert!(message.contains("cannot read --normalize"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_loaders_without_a_gpu_say_what_is_needed() {
    let error = run(args(&["--tiny", "--loader", "gpu"])).await.unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("candle") || message.contains("cuda"),
        "{message}"
    );
}

#[test]
fn the_loss_check_fails_on_a_loss_that_does_not_fall_or_is_not_finite() {
    assert!(check_loss_falls(&[3.0, 2.0, 2.5, 2.0, 1.5, 1.0]).is_ok());
    assert!(check_loss_falls(&[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]).is_err());
    assert!(check_loss_falls(&[1.0, 2.0, 1.0, 0.5, f32::NAN, 0.1]).is_err());
    assert!(check_loss_falls(&[1.0, 0.5]).is_err());
}
