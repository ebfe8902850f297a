//! `ferrolm list` and `ferrolm rm`: what the caches hold, and removing it.

use anyhow::bail;
use ferrolm::hub::{self, hf::HubCache, hf::HubConfig};

use crate::pull::human_bytes;

/// Arguments of `ferrolm list`.
#[derive(clap::Args)]
pub struct ListArgs {
    /// Also list every file of each Hub snapshot.
    #[arg(long)]
    files: bool,
}

/// Arguments of `ferrolm rm`.
#[derive(clap::Args)]
pub struct RmArgs {
    /// Models to remove: Hub repositories (org/repo: every revision and file of it) or catalog
    /// names.
    #[arg(required = true)]
    names: Vec<String>,
}

/// `ferrolm list`: the Hub cache's repositories and the catalog's downloaded models.
pub fn list(args: ListArgs) -> anyhow::Result<()> {
    let cache = HubCache::new(HubConfig::from_env().cache);
    let repos = cache.repos();
    println!("{:<48} {:>10}  REVISIONS", "HUB REPOSITORY", "SIZE");
    for r in &repos {
        let revs: Vec<String> = r
            .snapshots
            .iter()
            .map(|s| {
                let refs =
                    if s.refs.is_empty() { String::new() } else { format!(" ({})", s.refs.join(", ")) };
                format!("{}{refs}", &s.commit[..s.commit.len().min(12)])
            })
            .collect();
        println!("{:<48} {:>10}  {}", r.repo, human_bytes(r.size), revs.join(", "));
        if args.files {
            for s in &r.snapshots {
                for f in &s.files {
                    println!("    {}", r.path.join("snapshots").join(&s.commit).join(f).display());
                }
            }
        }
    }
    if repos.is_empty() {
        println!("(none)");
    }
    println!("Hub cache: {}\n", cache.root().display());

    let dir = hub::model_dir()?;
    println!("{:<48} {:>10}  FILE", "CATALOG MODEL", "SIZE");
    let mut any = false;
    for e in hub::catalog() {
        let path = dir.join(e.file_name);
        if let Ok(meta) = std::fs::metadata(&path) {
            any = true;
            println!("{:<48} {:>10}  {}", e.name, human_bytes(meta.len()), path.display());
        }
    }
    if !any {
        println!("(none; `ferrolm pull --list` shows the catalog)");
    }
    Ok(())
}

/// `ferrolm rm`: removes Hub repositories or catalog models from their caches.
pub fn rm(args: RmArgs) -> anyhow::Result<()> {
    let cache = HubCache::new(HubConfig::from_env().cache);
    for name in &args.names {
        if let Some(entry) = hub::find(name) {
            let path = hub::model_path(entry)?;
            if !path.exists() {
                bail!("{name} is not downloaded");
            }
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            std::fs::remove_file(&path)?;
            let _ = std::fs::remove_file(hub::marker_path(&path));
            println!("removed {} ({})", path.display(), human_bytes(size));
            continue;
        }
        let Some(hf) = hub::hf::HfName::parse(name)? else {
            bail!("'{name}' is neither a catalog model nor a Hub repository (org/repo)");
        };
        match cache.remove(&hf.repo)? {
            Some(size) => println!("removed {} ({})", hf.repo, human_bytes(size)),
            None => bail!("{} is not in the Hub cache ({})", hf.repo, cache.root().display()),
        }
    }
    Ok(())
}
