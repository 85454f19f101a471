//! `tandem-bank`: the bank test of tandem under faults. See `--help`.

use std::process::ExitCode;

use tandem_bank::args::{parse, Invocation, USAGE};
use tandem_bank::{controller, worker};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let invocation = match parse(&args, std::env::var("MONGODB_URI").ok()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tandem-bank: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tandem-bank: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match invocation {
        Invocation::Help => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Invocation::Worker(args) => {
            let code = runtime.block_on(worker::run(args));
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        Invocation::Run(options) => runtime.block_on(async {
            let files = controller::run_dir(&options);
            tokio::select! {
                result = controller::run(options) => match result {
                    Ok(outcome) => {
                        println!("{}", outcome.line());
                        if outcome.violations.is_empty() {
                            ExitCode::SUCCESS
                        } else {
                            ExitCode::from(1)
                        }
                    }
                    Err(e) => {
                        println!("bank: error: {e}");
                        ExitCode::from(2)
                    }
                },
                _ = tokio::signal::ctrl_c() => {
                    // Dropping the run kills every child process it started.
                    println!(
                        "bank: interrupted; stopping every process of this run; its files are in {}",
                        files.display()
                    );
                    ExitCode::from(130)
                }
            }
        }),
    }
}
