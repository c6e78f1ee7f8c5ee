//! A report's text as blocks — headings, paragraphs, tables, lists — made once from the
//! data and written two ways: as markdown (table.md's notes, compare's output) by
//! [`Doc::md`], and as HTML by `html::doc_html`, from the same blocks (the pages do not
//! parse the markdown). Text keeps the two inline marks both forms know: `code` and
//! **strong**.

/// One block of a report's text.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// `level` 1 to 4.
    Heading(usize, String),
    /// One paragraph, one line.
    Para(String),
    /// A table with a header row; every row as many cells as the header.
    Table {
        header: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    List(Vec<String>),
}

/// A report's text: blocks in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Doc(pub Vec<Block>);

impl Doc {
    pub fn push(&mut self, b: Block) {
        self.0.push(b);
    }

    pub fn append(&mut self, mut other: Doc) {
        self.0.append(&mut other.0);
    }

    /// As markdown: each block's lines, a blank line between blocks.
    pub fn md(&self) -> String {
        self.0.iter().map(block_md).collect::<Vec<_>>().join("\n")
    }
}

/// A table cell's text as a pipe table can hold it.
fn cell(text: &str) -> String {
    text.replace('|', "/")
}

fn block_md(b: &Block) -> String {
    match b {
        Block::Heading(level, text) => format!("{} {text}\n", "#".repeat(*level)),
        Block::Para(text) => format!("{text}\n"),
        Block::Table { header, rows } => {
            let line = |cells: &[String]| {
                format!(
                    "| {} |\n",
                    cells
                        .iter()
                        .map(|c| cell(c))
                        .collect::<Vec<_>>()
                        .join(" | ")
                )
            };
            let mut out = line(header);
            out.push_str(&format!("|{}\n", "---|".repeat(header.len())));
            for r in rows {
                out.push_str(&line(r));
            }
            out
        }
        Block::List(items) => items.iter().map(|i| format!("- {i}\n")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_written_as_markdown_with_a_blank_line_between() {
        let doc = Doc(vec![
            Block::Heading(2, "Trapped runs".into()),
            Block::Para("A run counts as `trapped`.".into()),
            Block::Table {
                header: vec!["a".into(), "b".into()],
                rows: vec![vec!["1".into(), "x|y".into()]],
            },
            Block::List(vec!["one".into(), "two".into()]),
        ]);
        assert_eq!(
            doc.md(),
            "## Trapped runs\n\nA run counts as `trapped`.\n\n| a | b |\n|---|---|\n| 1 | x/y |\n\n- one\n- two\n"
        );
    }
}
