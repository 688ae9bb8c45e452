//! `shmem new PATH`: a working project outside any shmem-rs checkout.

use std::path::{Path, PathBuf};

/// The files of a new project: (path in the project, template).
const FILES: [(&str, &str); 7] = [
    ("Cargo.toml", include_str!("../template/Cargo.toml")),
    ("README.md", include_str!("../template/README.md")),
    (
        "kernels/Cargo.toml",
        include_str!("../template/kernels.Cargo.toml"),
    ),
    (
        "kernels/src/lib.rs",
        include_str!("../template/kernels.lib.rs"),
    ),
    ("app/Cargo.toml", include_str!("../template/app.Cargo.toml")),
    ("app/build.rs", include_str!("../template/app.build.rs")),
    ("app/src/main.rs", include_str!("../template/app.main.rs")),
];

/// The checkout this command was built from.
fn this_checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A package name from `raw` (a directory name): lowercase letters, digits, `-`.
fn package_name(raw: &str) -> Result<String, String> {
    let name: String = raw
        .chars()
        .map(|c| match c {
            'A'..='Z' => c.to_ascii_lowercase(),
            'a'..='z' | '0'..='9' | '-' => c,
            _ => '-',
        })
        .collect();
    let name = name.trim_matches('-').to_string();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "`{raw}` does not make a package name (letters first); pass --name"
        ));
    }
    Ok(name)
}

/// Writes the project; `name` defaults to the directory's name.
pub fn run(path: &Path, name: Option<&str>, shmem_rs: Option<&Path>) -> Result<(), String> {
    let raw = match name {
        Some(n) => n.to_string(),
        None => path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| format!("{} has no last component; pass --name", path.display()))?,
    };
    let name = package_name(&raw)?;
    let checkout = shmem_rs
        .map(Path::to_path_buf)
        .unwrap_or_else(this_checkout);
    let checkout = checkout
        .canonicalize()
        .map_err(|e| format!("the shmem-rs checkout {}: {e}", checkout.display()))?;
    if !checkout.join("crates/shmem-host/Cargo.toml").is_file() {
        return Err(format!(
            "{} is not a shmem-rs checkout (no crates/shmem-host); pass --shmem-rs DIR",
            checkout.display()
        ));
    }
    if path.exists()
        && std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .next()
            .is_some()
    {
        return Err(format!(
            "{} exists and is not empty: choose a new directory",
            path.display()
        ));
    }
    let fill = |t: &str| {
        t.replace("{{name}}", &name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{shmem_rs}}", &checkout.display().to_string())
    };
    for (file, template) in FILES {
        let to = path.join(file);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        std::fs::write(&to, fill(template))
            .map_err(|e| format!("writing {}: {e}", to.display()))?;
    }
    println!(
        "wrote {} (package `{name}`, kernels `{name}-kernels`, shmem-rs at {})\n\
         next: cd {} && cargo build --release && SHMEM_SIM=1 ./target/release/{name}",
        path.display(),
        checkout.display(),
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(package_name("My App").unwrap(), "my-app");
        assert_eq!(package_name("halo_2d").unwrap(), "halo-2d");
        assert!(package_name("2d").is_err());
        assert!(package_name("__").is_err());
    }

    #[test]
    fn refuses_a_directory_in_use_and_a_bad_checkout() {
        let dir = std::env::temp_dir().join(format!("shmem-new-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("taken")).unwrap();
        std::fs::write(dir.join("taken/file"), "x").unwrap();
        let e = run(&dir.join("taken"), None, None).unwrap_err();
        assert!(e.contains("not empty"), "{e}");
        let e = run(&dir.join("fresh"), None, Some(&dir)).unwrap_err();
        assert!(e.contains("not a shmem-rs checkout"), "{e}");
    }

    #[test]
    fn every_placeholder_is_filled() {
        let dir = std::env::temp_dir().join(format!("shmem-new-ok-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run(&dir.join("demo"), None, None).unwrap();
        for (file, _) in FILES {
            let text = std::fs::read_to_string(dir.join("demo").join(file)).unwrap();
            assert!(!text.contains("{{"), "{file}: {text}");
        }
        let main = std::fs::read_to_string(dir.join("demo/app/src/main.rs")).unwrap();
        assert!(main.contains("demo_kernels::send_to_next"), "{main}");
    }
}
